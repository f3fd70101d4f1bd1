"""``analyze``: what fusion buys, before and after, measured by one cost model and one planner.

Before = the model as imported on the trivial partition (every node its own kernel, every
intermediate materialized); after = the canonicalized model on the fused partition. Both sides use
the same precision and the same arena planner, so their difference is exactly what opfuse did. The
planned arena also decides which memory level activations live in (``opfuse.cost.roofline``).

On a target with cascades the "after" partition streams rows through ring buffers, so its arena can
go below the layer-by-layer lower bound (the largest sum of whole tensors live at one step of the
same kernels without cascades); each side reports both, ``peak_arena_bytes`` (the planned arena,
cascades included) and ``layer_by_layer_lower_bound_bytes``. ``cascades=False`` analyses the
layer-by-layer partition (what the C backend runs today).
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.cost import BYTES_PER_ELEMENT, CostSide, KernelCost, cost_model, resolve_precision
from opfuse.cost.precision import require_perf
from opfuse.memory import MemoryPlan, arena_lower_bound, plan_memory
from opfuse.pipeline import CompileResult, gc_paused

DEFAULT_PLANNER = "greedy-inplace"


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its costs, its arena plan and whether the arena fits."""

    cost: CostSide
    plan: MemoryPlan
    fits: bool
    layer_lower_bound: int = 0  # largest sum of whole tensors live at one step without cascades
    cascades: int = 0  # cascaded kernels in this side's partition

    def to_json(self) -> dict:
        data = self.cost.totals_json()
        data["peak_arena_bytes"] = self.plan.peak_bytes
        data["arena_lower_bound_bytes"] = self.plan.lower_bound_bytes
        data["layer_by_layer_lower_bound_bytes"] = self.layer_lower_bound
        data["cascades"] = self.cascades
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
                "layer_by_layer_lower_bound_bytes",
                "cascades",
                "latency_s",
                "energy_j",
                "fits",
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
            "cascade_decisions": self.fusion.get("cascade_decisions", []),
            "passes": self.fusion["passes"],
        }


@gc_paused()
def analyze(
    result: CompileResult,
    precision: str | None = None,
    planner: str = DEFAULT_PLANNER,
    activations_only: bool = False,
    cascades: bool = True,
) -> Analysis:
    """Costs and arena plans of ``result`` before and after fusion on its target (after without
    its cascades when ``cascades`` is false)."""
    target = result.target
    perf = require_perf(target)
    prec = resolve_precision(result.original, target, precision)
    bpe = BYTES_PER_ELEMENT[prec]
    inplace = planner == "greedy-inplace"

    def side(model, partition) -> Side:  # noqa: ANN001 (ir.Model, Partition)
        plan = plan_memory(model, partition, planner=planner, bytes_per_element=bpe)
        cost = cost_model(model, partition, target, prec, activations_only, plan.peak_bytes)
        layers = (
            arena_lower_bound(model, partition.without_cascades(), bpe, inplace=inplace)
            if partition.cascades
            else plan.lower_bound_bytes
        )
        fits = plan.peak_bytes <= perf.ram_bytes
        return Side(cost, plan, fits, layers, len(partition.cascades))

    return Analysis(
        model=result.source,
        target=target.name,
        precision=prec,
        planner=planner,
        activations_only=activations_only,
        ram_bytes=perf.ram_bytes,
        before=side(result.original, result.before),
        after=side(
            result.optimized,
            result.partition if cascades else result.partition.without_cascades(),
        ),
        fusion=result.fusion_json(),
    )
