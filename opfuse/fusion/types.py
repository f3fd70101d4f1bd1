"""The partitioner's frozen result: ordered kernels and a decision for every edge left unfused."""

from __future__ import annotations

from dataclasses import dataclass

# The vocabulary of refusals (DESIGN.md). Reports group decisions by these.
REASONS: dict[str, str] = {
    "multiple_consumers": "the value is read by several nodes, so it must be stored",
    "graph_output": "the value is a graph output, so it must be stored",
    "not_supported_by_target": "the target has no kernel that runs both ops as one",
    "opaque_op": "an op opfuse does not know (custom or unsupported) blocks fusion",
    "non_constant_weights": "weights are not constants, so they cannot be folded at compile time",
    "dynamic_shape": "a dimension is not known at compile time",
    "dtype_mismatch": "producer and consumer work in different element types",
    "chain_limit": "the kernel already holds as many ops as the target allows",
    "layout_change": "a data-movement op (reshape, transpose, ...) changes the layout between them",
    "other_producer_fused": "the consumer already joined the kernel of another of its producers",
}


@dataclass(frozen=True)
class Kernel:
    name: str  # predictable: "conv" alone, "fused_conv_add_relu" for several ops
    nodes: tuple[str, ...]  # member node names, in schedule order
    ops: tuple[str, ...]  # member op types, same order
    inputs: tuple[str, ...]  # values read from outside the kernel (activations and weights)
    outputs: tuple[str, ...]  # values written to memory (read by later kernels or graph outputs)


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

    def kernel_of(self, node_name: str) -> Kernel:
        for kernel in self.kernels:
            if node_name in kernel.nodes:
                return kernel
        raise KeyError(node_name)

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "kernels": [
                {"name": k.name, "ops": list(k.ops), "nodes": list(k.nodes)} for k in self.kernels
            ],
            "decisions": [
                {
                    "producer": d.producer,
                    "consumer": d.consumer,
                    "fused": d.fused,
                    "reason": d.reason,
                    "message": d.message,
                }
                for d in self.decisions
            ],
        }
