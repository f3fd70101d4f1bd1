"""Whole-schedule figures the reports state in one line: the weights a deployment stores, where the
time goes, the schedule's bound by the per-kernel rule, and what fusing a refused edge would save.

All of them are sums over ``CostSide.kernels`` or over the model's values, sized exactly as
``cost_model`` sizes them (``opfuse.cost.roofline`` states the accounting; docs/architecture.md,
"Pipeline": figures are computed in cost and memory, only shown by report).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from opfuse.cost.precision import BYTES_PER_ELEMENT
from opfuse.cost.roofline import names_bytes, values_by_name
from opfuse.cost.types import CostSide
from opfuse.schedule import Partition


def stored_weight_bytes(model: ir.Model, partition: Partition, precision: str) -> int:
    """Bytes of the distinct initializers the kernels read: what flash must hold. Unlike a side's
    ``weight_bytes`` (traffic) this does not drop to 0 with ``activations_only``, and a weight two
    kernels share is stored once."""
    initializers = set(model.graph.initializers)
    used = tuple(sorted({n for k in partition.kernels for n in k.inputs if n in initializers}))
    return names_bytes(used, values_by_name(model), BYTES_PER_ELEMENT[precision])


@dataclass(frozen=True)
class TimeSplit:
    """Where a schedule's latency goes, by the kernels' own roofline verdicts."""

    kernels: int
    memory_kernels: int  # kernels whose bound is "memory"
    compute_kernels: int
    memory_bound_s: float  # latency of the memory-bound kernels (dispatch included)
    compute_bound_s: float
    dispatch_s: float  # kernels x the target's per-kernel overhead
    compute_s: float  # sum of the kernels' compute times
    memory_s: float  # sum of the kernels' memory times
    latency_s: float
    flops: int
    traffic_bytes: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte over the whole schedule (0 when nothing moves)."""
        return self.flops / self.traffic_bytes if self.traffic_bytes else 0.0

    @property
    def ridge_point(self) -> float:
        """The per-kernel rule's ridge applied to the schedule as one kernel: attainable FLOP/s
        (FLOPs / compute time) over effective bandwidth (bytes / memory time)."""
        if not self.traffic_bytes or not self.compute_s:
            return 0.0
        return (self.flops / self.compute_s) * self.memory_s / self.traffic_bytes

    @property
    def bound(self) -> str:
        """"memory" when intensity < ridge point, i.e. memory time > compute time (the per-kernel
        rule of ``opfuse.cost.roofline`` on the sums)."""
        return "memory" if self.memory_s > self.compute_s else "compute"

    @property
    def memory_share(self) -> float:
        """The fraction of latency spent in memory-bound kernels (the latency-weighted view)."""
        return self.memory_bound_s / self.latency_s if self.latency_s else 0.0

    def to_json(self) -> dict:
        return {
            "kernels": self.kernels,
            "memory_bound_kernels": self.memory_kernels,
            "compute_bound_kernels": self.compute_kernels,
            "memory_bound_s": self.memory_bound_s,
            "compute_bound_s": self.compute_bound_s,
            "memory_bound_share": self.memory_share,
            "dispatch_s": self.dispatch_s,
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
            "intensity": self.intensity,
            "ridge_point": self.ridge_point,
            "bound": self.bound,
        }


def time_split(side: CostSide, dispatch_overhead_s: float) -> TimeSplit:
    """Sum ``side``'s kernels by their bound."""
    ks = side.kernels
    mem = [k for k in ks if k.bound == "memory"]
    return TimeSplit(
        kernels=len(ks),
        memory_kernels=len(mem),
        compute_kernels=len(ks) - len(mem),
        memory_bound_s=sum(k.latency_s for k in mem),
        compute_bound_s=sum(k.latency_s for k in ks if k.bound != "memory"),
        dispatch_s=len(ks) * dispatch_overhead_s,
        compute_s=sum(k.compute_s for k in ks),
        memory_s=sum(k.memory_s for k in ks),
        latency_s=side.latency_s,
        flops=side.flops,
        traffic_bytes=side.traffic_bytes,
    )


def refused_edge_savings(
    model: ir.Model, partition: Partition, precision: str
) -> dict[tuple[str, str], int]:
    """(producer, consumer) of each refused edge -> the activation bytes fusing it would save: the
    consumer's read of the values between them, plus the producer's write when the consumer is the
    value's only reader and it is not a graph output (else the value is stored anyway)."""
    bpe = BYTES_PER_ELEMENT[precision]
    values = values_by_name(model)
    readers: dict[str, set[str]] = {}
    made_by: dict[str, str] = {}
    for node in model.graph:
        for out in node.outputs:
            if out is not None and out.name:
                made_by[out.name] = node.name
        for value in node.inputs:
            if value is not None and value.name:
                readers.setdefault(value.name, set()).add(node.name)
    outputs = {v.name for v in model.graph.outputs}
    nodes = {n.name: n for n in model.graph}
    saved: dict[tuple[str, str], int] = {}
    for d in partition.decisions:
        if d.fused or d.consumer not in nodes:
            continue
        total = 0
        shared = {v.name for v in nodes[d.consumer].inputs if v is not None}
        for name in sorted(n for n in shared if made_by.get(n) == d.producer):
            size = names_bytes((name,), values, bpe)
            only = readers.get(name, set()) == {d.consumer} and name not in outputs
            total += size * (2 if only else 1)
        saved[(d.producer, d.consumer)] = total
    return saved
