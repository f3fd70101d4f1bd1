"""``verify_allocation``: an independent proof that a plan never lets two live tensors share bytes.

It re-derives everything from the plan's tensors and offsets (not from the planner's buffers):
alignment of every offset, every tensor inside the arena, and for every step, no two tensors live at
that step overlapping in [offset, offset + size), unless one is declared written in place over the
other (the pair must then start at the same offset, and the input must die where the output is born).
"""

from __future__ import annotations

from opfuse.memory.lifetimes import ALIGNMENT, TensorLife, align
from opfuse.memory.plan import MemoryPlan


class AllocationError(AssertionError):
    """A memory plan that would corrupt data; a bug in a planner, never bad user input."""


def _alias_groups(plan: MemoryPlan) -> dict[str, int]:
    names = [t.name for t in plan.tensors]
    parent = {name: name for name in names}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for out, src in plan.aliases.items():
        if out in parent and src in parent:
            parent[root(out)] = root(src)
    ids: dict[str, int] = {}
    return {name: ids.setdefault(root(name), len(ids)) for name in names}


def _check_aliases(plan: MemoryPlan, life: dict[str, TensorLife]) -> None:
    for out, src in plan.aliases.items():
        if out not in life or src not in life:
            raise AllocationError(f"in-place alias {out} -> {src} names an unknown tensor")
        if plan.offsets[out] != plan.offsets[src]:
            raise AllocationError(
                f"{out} is declared in place over {src} but sits at offset {plan.offsets[out]}, "
                f"not {plan.offsets[src]}"
            )
        if life[src].last != life[out].first:
            raise AllocationError(
                f"{out} is declared in place over {src}, but {src} is still read at step "
                f"{life[src].last} after {out} is written at step {life[out].first}"
            )


def verify_allocation(plan: MemoryPlan) -> None:
    """Raise AllocationError naming the culprit(s) if ``plan`` is unsafe; return None if it is sound."""
    life = {t.name: t for t in plan.tensors}
    for t in plan.tensors:
        if t.name not in plan.offsets:
            raise AllocationError(f"tensor {t.name} has no offset")
        offset = plan.offsets[t.name]
        if offset < 0 or offset % ALIGNMENT:
            raise AllocationError(
                f"tensor {t.name} offset {offset} is not {ALIGNMENT}-byte aligned"
            )
        if offset + align(t.size_bytes) > plan.peak_bytes:
            raise AllocationError(
                f"tensor {t.name} [{offset}, {offset + align(t.size_bytes)}) exceeds the arena "
                f"of {plan.peak_bytes} bytes"
            )
    _check_aliases(plan, life)
    group = _alias_groups(plan)
    # Two lives that meet share the step where the later one begins: checking those steps suffices.
    for step in sorted({t.first for t in plan.tensors}):
        live = sorted(
            (plan.offsets[t.name], plan.offsets[t.name] + t.size_bytes, t.name)
            for t in plan.tensors
            if t.first <= step <= t.last and t.size_bytes > 0
        )
        active: list[tuple[int, str]] = []  # (end, name) of ranges that reach past this start
        for start, end, name in live:
            active = [(e, n) for e, n in active if e > start]
            for _, other in active:
                if group[other] != group[name]:
                    raise AllocationError(
                        f"tensors {other} and {name} are both live at step {step} and overlap "
                        f"in the arena (offsets {plan.offsets[other]} and {start})"
                    )
            active.append((end, name))
    return None
