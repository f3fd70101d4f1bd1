"""``analyze``: what fusion buys, before and after, measured by one cost model and one planner.

Before = the model as imported on the trivial partition (every node its own kernel, every
intermediate materialized); after = the canonicalized model on the fused partition. Both sides use
the same precision and the same arena planner, so their difference is exactly what opfuse did. The
planned arena also decides which memory level activations live in (``opfuse.cost.roofline``).
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.cost import BYTES_PER_ELEMENT, CostSide, KernelCost, cost_model, resolve_precision
from opfuse.cost.precision import require_perf
from opfuse.ir import unknown_size_values
from opfuse.memory import MemoryPlan, plan_memory
from opfuse.pipeline import CompileResult, gc_paused

DEFAULT_PLANNER = "greedy-inplace"
# The totals that leave out tensors of unknown size (custom ops without type information).
LOWER_BOUND_FIELDS = ("activation_bytes", "traffic_bytes", "flops", "macs", "peak_arena_bytes",
                      "arena_lower_bound_bytes", "latency_s", "energy_j")


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its costs, its arena plan and whether the arena fits."""

    cost: CostSide
    plan: MemoryPlan
    fits: bool
    unknown: tuple[str, ...] = ()  # tensors of unknown size: counted 0, so totals are lower bounds

    def to_json(self) -> dict:
        data = self.cost.totals_json()
        data["unknown_bytes_tensors"] = list(self.unknown)
        data["lower_bounds"] = list(LOWER_BOUND_FIELDS) if self.unknown else []
        data["peak_arena_bytes"] = self.plan.peak_bytes
        data["arena_lower_bound_bytes"] = self.plan.lower_bound_bytes
        data["fits"] = self.fits
        return {
            key: data[key]
            for key in (
                "kernels",
                "activation_bytes",
                "weight_bytes",
                "traffic_bytes",
                "flops",
                "macs",
                "peak_arena_bytes",
                "arena_lower_bound_bytes",
                "latency_s",
                "energy_j",
                "fits",
                "unknown_bytes_tensors",
                "lower_bounds",
            )
        }


@dataclass(frozen=True)
class Analysis:
    model: str
    target: str
    precision: str
    planner: str
    activations_only: bool
    ram_bytes: int
    before: Side
    after: Side
    fusion: dict  # CompileResult.fusion_json(): kernels, decisions, passes

    @property
    def kernels(self) -> tuple[KernelCost, ...]:
        """The kernels after fusion."""
        return self.after.cost.kernels

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "target": self.target,
            "precision": self.precision,
            "planner": self.planner,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "kernels": [k.to_json() for k in self.kernels],
            "decisions": self.fusion["decisions"],
            "passes": self.fusion["passes"],
            "unknown_bytes_tensors": list(self.after.unknown),  # sizes no one states: see sides
        }


@gc_paused()
def analyze(
    result: CompileResult,
    precision: str | None = None,
    planner: str = DEFAULT_PLANNER,
    activations_only: bool = False,
) -> Analysis:
    """Costs and arena plans of ``result`` before and after fusion on its target."""
    target = result.target
    perf = require_perf(target)
    prec = resolve_precision(result.original, target, precision)
    bpe = BYTES_PER_ELEMENT[prec]

    def side(model, partition) -> Side:  # noqa: ANN001 (ir.Model, Partition)
        plan = plan_memory(model, partition, planner=planner, bytes_per_element=bpe)
        cost = cost_model(model, partition, target, prec, activations_only, plan.peak_bytes)
        return Side(cost, plan, plan.peak_bytes <= perf.ram_bytes, unknown_size_values(model))

    return Analysis(
        model=result.source,
        target=target.name,
        precision=prec,
        planner=planner,
        activations_only=activations_only,
        ram_bytes=perf.ram_bytes,
        before=side(result.original, result.before),
        after=side(result.optimized, result.partition),
        fusion=result.fusion_json(),
    )
