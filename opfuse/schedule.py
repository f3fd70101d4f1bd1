"""The schedule types every stage after fusion reads: kernels, their partition, ring buffers.

The partitioner (``opfuse/fusion``) builds a ``Partition``; the memory planner, the cost model, the
report and both backends read it. These types live outside ``fusion`` so that ``memory`` does not
import the partitioner and the partitioner may consult ``memory`` (its cascade cuts are planned on
the arena): docs/architecture.md, "One partition, one plan".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RingBuffer:
    """An intermediate of a cascade kept as a ring of ``rows`` of its ``height`` rows."""

    value: str  # the intermediate's name (never an arena tensor)
    rows: int
    height: int
    row_bytes: int  # one row (channels x width) at the model's element type

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def full_bytes(self) -> int:
        return self.height * self.row_bytes


@dataclass(frozen=True)
class Kernel:
    name: str  # predictable: "conv" alone, "fused_conv_add_relu" for several ops, "cascade"
    nodes: tuple[str, ...]  # member node names, in schedule order
    ops: tuple[str, ...]  # member op types, same order
    inputs: tuple[str, ...]  # values read from outside the kernel (activations and weights)
    outputs: tuple[str, ...]  # values written to memory (read by later kernels or graph outputs)
    # A cascade: its member kernels in order (each an anchor with its epilogues, or a pool or an
    # elementwise op), run in bands of ``band_rows`` output rows of the last member, each
    # intermediate a ring buffer (opfuse/fusion/rings.py). Empty / 0 for a plain kernel.
    members: tuple[Kernel, ...] = ()
    band_rows: int = 0
    ring_buffers: tuple[RingBuffer, ...] = ()

    @property
    def is_cascade(self) -> bool:
        return bool(self.members)


@dataclass(frozen=True)
class Decision:
    producer: str  # node name
    consumer: str  # node name
    fused: bool
    reason: str  # a key of REASONS
    message: str  # one sentence a person understands


@dataclass(frozen=True)
class Partition:
    target: str
    kernels: tuple[Kernel, ...]
    decisions: tuple[Decision, ...]
    # the layer-by-layer partition the cascades were cut from; None when no kernel is a cascade
    base: Partition | None = None
    # why neighbouring kernels were not streamed together in one cascade (one per data edge)
    cascade_decisions: tuple[Decision, ...] = ()

    def without_cascades(self) -> Partition:
        """Every cascade split back into its members (what a backend without row streaming runs)."""
        return self.base if self.base is not None else self

    @property
    def cascades(self) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if k.is_cascade)

    def kernel_of(self, node_name: str) -> Kernel:
        for kernel in self.kernels:
            if node_name in kernel.nodes:
                return kernel
        raise KeyError(node_name)

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "kernels": [_kernel_json(k) for k in self.kernels],
            "decisions": [_decision_json(d) for d in self.decisions],
            "cascade_decisions": [_decision_json(d) for d in self.cascade_decisions],
        }


def _decision_json(d: Decision) -> dict:
    return {
        "producer": d.producer,
        "consumer": d.consumer,
        "fused": d.fused,
        "reason": d.reason,
        "message": d.message,
    }


def _kernel_json(kernel: Kernel) -> dict:
    data: dict = {"name": kernel.name, "ops": list(kernel.ops), "nodes": list(kernel.nodes)}
    if kernel.is_cascade:
        data.update(cascade_json(kernel))
    elif kernel.ring_buffers:  # an attention kernel's scratch row (opfuse/fusion/attention.py)
        data["ring_buffers"] = cascade_json(kernel)["ring_buffers"]
    return data


def cascade_json(kernel: Kernel) -> dict:
    """members, band_rows, ring buffers (at the model's element type) of a cascade."""
    return {
        "members": [m.name for m in kernel.members],
        "band_rows": kernel.band_rows,
        "ring_buffers": [
            {"value": r.value, "rows": r.rows, "height": r.height, "bytes": r.nbytes}
            for r in kernel.ring_buffers
        ],
    }
