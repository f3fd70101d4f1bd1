"""``analyze``: what fusion buys, before and after, measured by one cost model and one planner.

Before = the model as imported on the trivial partition (every node its own kernel, every
intermediate materialized); after = the canonicalized model on the fused partition. Both sides use
the same precision and the same arena planner, so their difference is exactly what opfuse did. The
planned arena also decides which memory level activations live in (``opfuse.cost.roofline``).

Canonical = the canonicalized model on its trivial partition: before -> canonical is what folding
(BatchNorm into Conv, ...) bought, canonical -> after what fusion itself bought. The deployment
verdict (``deployment_json``) sets the fused side against the target: arena vs RAM, stored weights vs
flash, the step at the arena's peak and where the time goes (``opfuse.memory.peak``,
``opfuse.cost.summary``).

On a target with cascades the "after" partition streams rows through ring buffers, so its arena can
go below the layer-by-layer lower bound (the largest sum of whole tensors live at one step of the
same kernels without cascades); each side reports both, ``peak_arena_bytes`` (the planned arena,
cascades included) and ``layer_by_layer_lower_bound_bytes``. ``cascades=False`` analyses the
layer-by-layer partition. The "after" side is ``CompileResult.schedule``: the very partition and
plan ``--emit c`` builds (docs/architecture.md, "One partition, one plan").
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.compiled import DEFAULT_PLANNER, CompileResult
from opfuse.cost import CostSide, KernelCost, cost_model, resolve_precision
from opfuse.cost.precision import element_bytes, model_precision, precision_note, require_perf
from opfuse.cost.summary import stored_weight_bytes, time_split
from opfuse.fusion import trivial_partition
from opfuse.ir import unknown_size_values
from opfuse.memory import MemoryPlan, arena_lower_bound, peak_step, plan_memory
from opfuse.pipeline import gc_paused
from opfuse.quant import is_quantized

# The totals that leave out tensors of unknown size (custom ops without type information).
LOWER_BOUND_FIELDS = ("activation_bytes", "traffic_bytes", "flops", "macs", "peak_arena_bytes",
                      "arena_lower_bound_bytes", "latency_s", "energy_j")


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its costs, its arena plan and whether the arena fits."""

    cost: CostSide
    plan: MemoryPlan
    fits: bool
    stored_weight_bytes: int = 0  # distinct weights the side stores (flash), whatever the accounting
    unknown: tuple[str, ...] = ()  # tensors of unknown size: counted 0, so totals are lower bounds
    layer_lower_bound: int = 0  # largest sum of whole tensors live at one step without cascades
    cascades: int = 0  # cascaded kernels in this side's partition

    def to_json(self) -> dict:
        data = self.cost.totals_json()
        data["unknown_bytes_tensors"] = list(self.unknown)
        data["lower_bounds"] = list(LOWER_BOUND_FIELDS) if self.unknown else []
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
                "unknown_bytes_tensors",
                "lower_bounds",
            )
        }


@dataclass(frozen=True)
class Analysis:
    model: str
    target: str
    precision: str
    precision_note: str  # "" when the precision is the model's own (opfuse.cost.precision)
    planner: str
    activations_only: bool
    ram_bytes: int
    before: Side
    after: Side
    fusion: dict  # CompileResult.fusion_json(): kernels, decisions, passes
    canonical: Side | None = None  # canonicalized model, one kernel per node
    flash_bytes: int | None = None  # the target's flash; None: the target file does not say
    dispatch_overhead_s: float = 0.0
    cascades: bool = True  # whether "after" is the partition with its cascades (analyze(cascades=))

    def side(self, which: str) -> Side:
        return {"before": self.before, "canonical": self.canonical, "after": self.after}[which]

    def deployment_json(self, which: str = "after") -> dict:
        """The deployment verdict of one side: arena vs RAM, weights vs flash (margins: positive
        is headroom, negative is the overage), the step at the arena's peak with the tensors live
        there, and where the time goes (``opfuse.cost.summary.TimeSplit``)."""
        side = self.side(which)
        peak = peak_step(side.plan)
        peak_json = peak.to_json()
        kernels = side.cost.kernels
        peak_json["kernel"] = kernels[peak.step].name if 0 <= peak.step < len(kernels) else ""
        weights, flash = side.stored_weight_bytes, self.flash_bytes
        return {
            "side": which,
            "arena_bytes": side.plan.peak_bytes,
            "ram_bytes": self.ram_bytes,
            "fits_ram": side.fits,
            "ram_margin_bytes": self.ram_bytes - side.plan.peak_bytes,
            "weight_bytes": weights,
            "flash_bytes": flash,
            "fits_flash": None if flash is None else weights <= flash,
            "flash_margin_bytes": None if flash is None else flash - weights,
            "peak": peak_json,
            "time": time_split(side.cost, self.dispatch_overhead_s).to_json(),
            # the same model one kernel per node (`compile --emit c --no-fuse`): fusion can raise
            # the peak (a fused kernel's inputs and outputs are live together)
            "unfused_arena_bytes": None if self.canonical is None or which != "after"
            else self.canonical.plan.peak_bytes,
        }

    @property
    def kernels(self) -> tuple[KernelCost, ...]:
        """The kernels after fusion."""
        return self.after.cost.kernels

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "target": self.target,
            "precision": self.precision,
            "precision_note": self.precision_note,
            "planner": self.planner,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "kernels": [k.to_json() for k in self.kernels],
            "decisions": self.fusion["decisions"],
            "cascade_decisions": self.fusion.get("cascade_decisions", []),
            "passes": self.fusion["passes"],
            "unknown_bytes_tensors": list(self.after.unknown),  # sizes no one states: see sides
            # what --activations-only changed, the folded-only column, the deployment verdict
            "accounting": "activations-only" if self.activations_only else "activations+weights",
            **({"canonical": self.canonical.to_json()} if self.canonical is not None else {}),
            "deployment": self.deployment_json("after"),
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
    own = None if is_quantized(result.original) else precision  # int8 models: their own dtypes
    prec = resolve_precision(result.original, target, own)
    # floats at their own size unless a what-if precision re-sizes them: then the "after" plan is
    # the one the C backend builds (same cache key in CompileResult.schedule)
    bpe = None if prec == model_precision(result.original) else element_bytes(result.original, prec)
    inplace = planner == "greedy-inplace"
    # the decisions shown are those of the partition analysed: without its cascades, the edges
    # inside them are refused again with their layer-by-layer reasons
    after = result.schedule(cascades=cascades, planner=planner, bytes_per_element=bpe)

    def side(model, partition, plan=None) -> Side:  # noqa: ANN001 (ir.Model, Partition, plan)
        if plan is None:
            plan = plan_memory(model, partition, planner=planner, bytes_per_element=bpe)
        cost = cost_model(model, partition, target, prec, activations_only, plan.peak_bytes)
        stored = stored_weight_bytes(model, partition, prec)
        layers = (
            arena_lower_bound(model, partition.without_cascades(), bpe, inplace=inplace)
            if partition.cascades
            else plan.lower_bound_bytes
        )
        fits = plan.peak_bytes <= perf.ram_bytes
        return Side(
            cost, plan, fits, stored, unknown_size_values(model), layers, len(partition.cascades)
        )

    fusion = after.partition.to_json() | {"passes": dict(result.passes)}
    return Analysis(
        model=result.source,
        target=target.name,
        precision=prec,
        precision_note=precision_note(result.original, precision, prec),
        planner=planner,
        activations_only=activations_only,
        ram_bytes=perf.ram_bytes,
        before=side(result.original, result.before),
        after=side(after.model, after.partition, after.plan),
        fusion=fusion,
        canonical=side(result.optimized, trivial_partition(result.optimized)),
        flash_bytes=perf.flash_bytes,
        dispatch_overhead_s=perf.dispatch_overhead_s,
        cascades=cascades,
    )
