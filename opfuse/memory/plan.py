"""``plan_memory``: live ranges -> a planner -> offsets, arena size and its lower bound.

Planners:

- ``naive``: no reuse; every tensor its own slot. The arena is the sum of aligned sizes.
- ``greedy``: TFLite Micro's GreedyMemoryPlanner rule: visit tensors largest first and place each at
  the lowest 16-byte-aligned offset where it overlaps no placed tensor live at the same step. The
  other visiting orders in ``placement.ORDERINGS`` are tried too and, while the arena is above the
  lower bound, up to 64 seeded size-jittered orders; the smallest arena is kept (TFLite Micro's
  order wins ties). Deterministic: the same model always gets the same plan.
- ``greedy-inplace``: first merge each eligible kernel output with the input it overwrites
  (``inplace``) into one buffer, then greedy. If merging happens to make greedy's arena larger, the
  plain greedy plan is kept (no aliases), so greedy-inplace is never worse than greedy.

``lower_bound_bytes`` is the largest sum of aligned sizes of the plan's buffers live at one step:
no placement of those buffers (with the plan's aliases, if any) can use a smaller arena. For
``greedy-inplace`` it bounds placements that make the same in-place choices, not every possible one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from opfuse.errors import OpfuseError
from opfuse.memory.inplace import inplace_aliases, merged_buffers
from opfuse.memory.lifetimes import TensorLife, live_ranges
from opfuse.memory.placement import (
    Buffer,
    best_greedy,
    buffers_of,
    lower_bound,
    place_naive,
)
from opfuse.schedule import Partition

PLANNERS: tuple[str, ...] = ("naive", "greedy", "greedy-inplace")


@dataclass(frozen=True)
class MemoryPlan:
    planner: str
    tensors: tuple[TensorLife, ...]
    offsets: dict[str, int]  # tensor name -> byte offset in the arena
    peak_bytes: int  # arena size: max over tensors of offset + aligned size
    lower_bound_bytes: int
    aliases: dict[str, str] = field(default_factory=dict)  # output -> input it overwrites
    ordering: str = ""  # the greedy visiting order that won ("" for naive)

    def fits(self, ram_bytes: int) -> bool:
        return fits(self, ram_bytes)

    def to_json(self) -> dict:
        return {
            "planner": self.planner,
            "peak_bytes": self.peak_bytes,
            "lower_bound_bytes": self.lower_bound_bytes,
            "ordering": self.ordering,
            "aliases": dict(self.aliases),
            "tensors": [
                {
                    "name": t.name,
                    "kind": t.kind,
                    "size_bytes": t.size_bytes,
                    "first": t.first,
                    "last": t.last,
                    "offset": self.offsets[t.name],
                }
                for t in self.tensors
            ],
        }


def fits(plan: MemoryPlan, ram_bytes: int) -> bool:
    """Whether the plan's arena fits in ``ram_bytes``."""
    return plan.peak_bytes <= ram_bytes


def plan_memory(
    model: ir.Model,
    partition: Partition,
    planner: str = "greedy",
    bytes_per_element: int | None = None,
    *,
    overwrite_inputs: bool = True,
) -> MemoryPlan:
    """Plan the activation arena of ``partition``'s schedule of ``model`` with ``planner``."""
    if planner not in PLANNERS:
        raise OpfuseError(f"unknown planner '{planner}' (planners: {', '.join(PLANNERS)})")
    tensors = live_ranges(model, partition, bytes_per_element)
    return plan_tensors(
        tensors,
        planner,
        inplace_aliases(model, partition, tensors, overwrite_inputs)
        if planner == "greedy-inplace"
        else {},
    )


def arena_lower_bound(
    model: ir.Model,
    partition: Partition,
    bytes_per_element: int | None = None,
    *,
    inplace: bool = False,
) -> int:
    """The largest sum of aligned tensor sizes live at one step of ``partition``'s schedule: no
    arena for that schedule is smaller, whatever the planner (before any in-place merging; with
    ``inplace``, after merging every eligible in-place pair, as greedy-inplace may)."""
    tensors = live_ranges(model, partition, bytes_per_element)
    if not inplace:
        return lower_bound(buffers_of(tensors))
    return lower_bound(merged_buffers(tensors, inplace_aliases(model, partition, tensors)))


def plan_tensors(
    tensors: tuple[TensorLife, ...], planner: str, aliases: dict[str, str] | None = None
) -> MemoryPlan:
    """Plan hand-made live ranges (``aliases`` are used by greedy-inplace only)."""
    if planner not in PLANNERS:
        raise OpfuseError(f"unknown planner '{planner}' (planners: {', '.join(PLANNERS)})")
    plain = buffers_of(tensors)
    if planner == "naive":
        offsets, arena = place_naive(plain)
        return _plan(planner, tensors, plain, offsets, arena, {}, "")
    ordering, offsets, arena = best_greedy(plain)
    if planner == "greedy" or not aliases:
        return _plan(planner, tensors, plain, offsets, arena, {}, ordering)
    merged = merged_buffers(tensors, aliases)
    m_ordering, m_offsets, m_arena = best_greedy(merged)
    if m_arena > arena:
        return _plan(planner, tensors, plain, offsets, arena, {}, ordering)
    return _plan(planner, tensors, merged, m_offsets, m_arena, dict(aliases), m_ordering)


def _plan(
    planner: str,
    tensors: tuple[TensorLife, ...],
    buffers: tuple[Buffer, ...],
    buffer_offsets: dict[int, int],
    arena: int,
    aliases: dict[str, str],
    ordering: str,
) -> MemoryPlan:
    offsets = {name: buffer_offsets[i] for i, b in enumerate(buffers) for name in b.members}
    return MemoryPlan(
        planner=planner,
        tensors=tensors,
        offsets=offsets,
        peak_bytes=arena,
        lower_bound_bytes=lower_bound(buffers),
        aliases=aliases,
        ordering=ordering,
    )
