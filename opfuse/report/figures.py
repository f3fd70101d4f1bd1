"""The figures the report needs beyond ``Analysis.to_json()``: per-kernel costs before fusion (the
roofline's hollow dots) and both arena plans (the memory timelines). Both come from the Analysis
itself (``analysis.before`` / ``analysis.after``: cost side and memory plan), never estimated here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opfuse.analysis import Analysis
    from opfuse.memory import MemoryPlan


def memory_plans(analysis: Analysis) -> tuple[MemoryPlan, MemoryPlan]:
    """(before, after) arena plans, as planned by the analysis."""
    return analysis.before.plan, analysis.after.plan


def before_kernels(analysis: Analysis) -> list[dict[str, Any]]:
    """Per-kernel figures of the op-by-op schedule, in the JSON contract's kernel form."""
    return [k.to_json() for k in analysis.before.cost.kernels]


def levels(analysis: Analysis) -> dict[str, str]:
    """Where activations and weights live on each side (memory level names)."""
    return {
        "before_activations": analysis.before.cost.activation_level,
        "after_activations": analysis.after.cost.activation_level,
        "weights": analysis.after.cost.weight_level,
    }
