"""The activation arena: live ranges on a kernel schedule, planners, lower bound, verification.

Before fusion the schedule is op by op (every intermediate written to memory); after fusion it is
the fused kernels, whose internal values never reach memory. See docs/architecture.md, "Memory plan".
"""

from __future__ import annotations

from opfuse.memory.inplace import DATA_MOVEMENT, inplace_aliases, kernel_in_place
from opfuse.memory.lifetimes import ALIGNMENT, TensorLife, align, live_ranges
from opfuse.memory.peak import PeakStep, peak_step
from opfuse.memory.placement import ORDERINGS, lower_bound
from opfuse.memory.plan import (
    PLANNERS,
    MemoryPlan,
    arena_lower_bound,
    fits,
    plan_memory,
    plan_tensors,
)
from opfuse.memory.verify import AllocationError, verify_allocation

__all__ = [
    "ALIGNMENT",
    "DATA_MOVEMENT",
    "ORDERINGS",
    "PLANNERS",
    "PeakStep",
    "AllocationError",
    "MemoryPlan",
    "TensorLife",
    "align",
    "arena_lower_bound",
    "fits",
    "inplace_aliases",
    "kernel_in_place",
    "live_ranges",
    "lower_bound",
    "peak_step",
    "plan_memory",
    "plan_tensors",
    "verify_allocation",
]
