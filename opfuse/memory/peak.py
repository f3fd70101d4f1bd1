"""The step at an arena plan's peak and the tensors live there: what a deployer must shrink.

The peak step is the first step where the buffers live at once (aliased tensors share one buffer)
add up to the most bytes; that sum is the plan's ``lower_bound_bytes``. The arena can be larger than
it (placement leaves gaps), but no plan of these buffers is smaller, so these are the tensors to
shrink or split (``opfuse.memory.plan`` states the planners; docs/architecture.md, "Pipeline").
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.memory.inplace import merged_buffers
from opfuse.memory.lifetimes import TensorLife
from opfuse.memory.plan import MemoryPlan


@dataclass(frozen=True)
class PeakStep:
    step: int  # index of the kernel in the schedule (-1 for an empty plan)
    live_bytes: int  # aligned bytes of the buffers live at ``step``
    tensors: tuple[TensorLife, ...]  # live at ``step``, largest first

    def to_json(self) -> dict:
        return {
            "step": self.step,
            "live_bytes": self.live_bytes,
            "tensors": [
                {
                    "name": t.name,
                    "size_bytes": t.size_bytes,
                    "kind": t.kind,
                    "first": t.first,
                    "last": t.last,
                }
                for t in self.tensors
            ],
        }


def peak_step(plan: MemoryPlan) -> PeakStep:
    """The first step with the most bytes live in ``plan`` (aliases counted once)."""
    buffers = merged_buffers(plan.tensors, plan.aliases)
    if not buffers:
        return PeakStep(-1, 0, ())
    steps = max(b.last for b in buffers) + 1
    live = [0] * (steps + 1)
    for b in buffers:
        live[b.first] += b.size
        live[b.last + 1] -= b.size
    best_step, best, running = 0, -1, 0
    for step in range(steps):
        running += live[step]
        if running > best:
            best_step, best = step, running
    tensors = sorted(
        (t for t in plan.tensors if t.live_at(best_step)), key=lambda t: (-t.size_bytes, t.name)
    )
    return PeakStep(best_step, best, tuple(tensors))
