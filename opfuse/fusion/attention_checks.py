"""Why an attention core is not one kernel, as named pattern constraints (docs/architecture.md,
"Attention"): structural first (the scores read elsewhere, unknown sizes, the Softmax axis, a mask
that does not broadcast), then the target's ``[fusion] attention``, then whether the backend writes
the kernel and what it leaves of the kernels the core leaves. The first refusal is the one to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from opfuse.fusion.attention import Core, dims, sole_reader
from opfuse.fusion.constraints import (
    EMITTABLE,
    HEAD,
    STRUCTURAL,
    TARGET,
    Fields,
    PatternConstraint,
    first_pattern_refusal,
    pattern_constraint,
)
from opfuse.fusion.rules import Refusal
from opfuse.fusion.support import KernelSupport
from opfuse.schedule import Partition
from opfuse.targets import Target

CORE = "the attention core at Softmax '{softmax}' "
IS_NOT = CORE + "is not one kernel on {target}: "


@dataclass(frozen=True)
class AttentionCase:
    """One matched core on ``target``; ``layers`` is the greedy partition the core would leave."""

    core: Core
    target: Target
    support: KernelSupport
    opset: int
    layers: Partition | None = None
    by_name: dict[str, ir.Node] = field(default_factory=dict)

    def fields(self) -> Fields:
        return {"softmax": self.core.softmax.name, "target": self.target.name,
                "backend": self.support.backend}

    def chain(self) -> list[tuple[ir.Node, ir.Node]]:
        """Each node of the scores' path with its reader in the core."""
        nodes = [self.core.qk, *self.core.scores, self.core.softmax]
        return list(zip(nodes, [*nodes[1:], self.core.pv], strict=True))


@pattern_constraint(STRUCTURAL, "graph_output", IS_NOT + "'{value}' is a graph output")
def constraint_attention_scores_not_output(a: AttentionCase) -> Fields | None:
    out = next((n.outputs[0] for n, _ in a.chain() if n.outputs[0].is_graph_output()), None)
    return None if out is None else {"value": out.name}


@pattern_constraint(STRUCTURAL, "multiple_consumers",
                    IS_NOT + "'{value}' is read by {readers} nodes, so the scores must be stored")
def constraint_attention_scores_read_once(a: AttentionCase) -> Fields | None:
    out = next((n.outputs[0] for n, r in a.chain() if not sole_reader(n.outputs[0], r)), None)
    return None if out is None else {"value": out.name, "readers": len(out.consumers())}


@pattern_constraint(STRUCTURAL, "dynamic_shape", IS_NOT + "'{value}' has no static shape")
def constraint_attention_static_shapes(a: AttentionCase) -> Fields | None:
    values = [v for n in a.core.nodes for v in (*n.inputs, *n.outputs) if v is not None]
    value = next((v for v in values if dims(v) is None), None)
    return None if value is None else {"value": value.name}


def softmax_axis(node: ir.Node, opset: int) -> int:
    """The axis Softmax normalises, non-negative (before opset 13 the default was 1)."""
    rank = len(node.inputs[0].shape)
    attr = node.attributes.get("axis")
    axis = attr.as_int() if attr is not None else (-1 if opset >= 13 else 1)
    return axis % rank if rank else 0


@pattern_constraint(STRUCTURAL, "attention_softmax_axis",
                    IS_NOT + "its Softmax runs over axis {axis}, not the keys (the last axis of "
                    "{shape})")
def constraint_attention_softmax_over_keys(a: AttentionCase) -> Fields | None:
    shape = dims(a.core.score_value)
    axis = softmax_axis(a.core.softmax, a.opset)
    return None if axis == len(shape) - 1 else {"axis": axis, "shape": list(shape)}


@pattern_constraint(STRUCTURAL, "attention_mask",
                    IS_NOT + "{op} '{node}' broadcasts the scores {shape} up to {out}")
def constraint_attention_mask_broadcasts(a: AttentionCase) -> Fields | None:
    """Each score op keeps the scores' shape, so by ONNX's broadcasting its other operand
    broadcasts over them."""
    shape = dims(a.core.score_value)
    node = next((n for n in a.core.scores if dims(n.outputs[0]) != shape), None)
    if node is None:
        return None
    return {"op": node.op_type, "node": node.name, "shape": list(shape),
            "out": list(dims(node.outputs[0]))}


@pattern_constraint(STRUCTURAL, "attention_mask",
                    IS_NOT + "{op} '{node}' reads the scores more than once")
def constraint_attention_scores_once_per_op(a: AttentionCase) -> Fields | None:
    carried = a.core.score_value
    for node in a.core.scores:
        arity = 2 + (node.op_type == "Where")
        if sum(v is carried for v in node.inputs) != 1 or len(node.inputs) != arity:
            return {"op": node.op_type, "node": node.name}
        carried = node.outputs[0]
    return None


@pattern_constraint(TARGET, "not_supported_by_target",
                    IS_NOT + "its kernels do not stream attention ([fusion] attention = false)")
def constraint_attention_target_streams(a: AttentionCase) -> Fields | None:
    return None if a.target.fusion.attention else {}


@pattern_constraint(EMITTABLE, "not_supported_by_target",
                    IS_NOT + "{backend} writes no such kernel ({why})")
def constraint_attention_emittable(a: AttentionCase) -> Fields | None:
    why = a.support.why_not_kernel(list(a.core.nodes))
    return None if why is None else {"why": why}


@pattern_constraint(EMITTABLE, "not_supported_by_target",
                    CORE + "would leave {kernel} as a kernel {backend} does not write ({why})")
def constraint_attention_leaves_writable_kernels(a: AttentionCase) -> Fields | None:
    """The kernels that lose the core's nodes must stay kernels the backend writes."""
    if a.layers is None:
        return None
    names = {n.name for n in a.core.nodes}
    for kernel in a.layers.kernels:
        rest = [a.by_name[n] for n in kernel.nodes if n not in names]
        if 1 < len(rest) < len(kernel.nodes):
            why = a.support.why_not_kernel(rest)
            if why is not None:
                return {"kernel": kernel.name, "why": why}
    return None


ATTENTION: tuple[PatternConstraint, ...] = (
    constraint_attention_scores_not_output,
    constraint_attention_scores_read_once,
    constraint_attention_static_shapes,
    constraint_attention_softmax_over_keys,
    constraint_attention_mask_broadcasts,
    constraint_attention_scores_once_per_op,
    constraint_attention_target_streams,
    constraint_attention_emittable,
    constraint_attention_leaves_writable_kernels,
)


def check(case: AttentionCase) -> Refusal | None:
    """Why ``case.core`` may not be one kernel on ``case.target`` (None: it may)."""
    return first_pattern_refusal(case, ATTENTION)


@dataclass(frozen=True)
class AttentionExit:
    """A reader of a fused core's output, asking to join the attention kernel; ``inside`` names
    the nodes of every fused core."""

    reader: ir.Node
    inside: frozenset[str]
    target: str

    def fields(self) -> Fields:
        return {"consumer": self.reader.op_type, "kernel": "the attention kernel",
                "target": self.target}


@pattern_constraint(TARGET, "not_supported_by_target",
                    HEAD + "it writes its output rows without an epilogue")
def constraint_attention_no_epilogue(e: AttentionExit) -> Fields | None:
    return None if e.reader.name in e.inside else {}
