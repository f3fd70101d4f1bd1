"""The partitioner's vocabulary: a kernel under construction (``Group``) and its stage, a
``Refusal``, and the graph predicates the named constraints share (``constraints.py``; the checks
themselves are in ``structural.py`` and ``capability.py``, their order in ``checks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from opfuse.ops import ACTIVATION, ARITH, CLAMP, OpKind, groups, kind

CONVERSIONS = groups.CONVERSIONS
POOLS = groups.ALL_POOLS  # windowed and global: both end an anchor's kernel as its pool

# Group stages: what the kernel's last op was, hence what it may still take.
ANCHOR = "anchor"  # an anchor (plus epilogues so far): takes epilogues, a pool if anchor_pool
POOL = "pool"  # ends with a pool (alone or after an anchor): takes pool_epilogue classes
ELEMWISE = "elementwise"  # a standalone elementwise/broadcast chain
CLOSED = "closed"  # injective, reduce, opaque: nothing joins

_CLASS_WORDS = {
    CLAMP: "a clamp",
    ACTIVATION: "an activation",
    ARITH: "arithmetic with a constant",
}


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


@dataclass
class Group:
    """A kernel under construction (internal, mutable while partitioning)."""

    head: ir.Node
    stage: str
    nodes: list[ir.Node] = field(default_factory=list)

    @property
    def label(self) -> str:
        return "+".join(n.op_type for n in self.nodes)


def initial_stage(node: ir.Node) -> str:
    k = kind(node)
    if k == OpKind.ANCHOR:
        return ANCHOR
    if node.op_type in POOLS and k == OpKind.REDUCE:
        return POOL
    if k in (OpKind.ELEMWISE, OpKind.BROADCAST):
        return ELEMWISE
    return CLOSED


def next_stage(group: Group, node: ir.Node) -> str:
    """The group's stage once ``node`` has joined it."""
    if group.stage == ANCHOR and node.op_type in POOLS:
        return POOL
    if kind(node) == OpKind.REDUCE and node.op_type not in POOLS:
        return CLOSED  # a norm that joined an Add (fusion/transformer.py) ends its kernel
    return group.stage


def is_constant(value: ir.Value | None) -> bool:
    if value is None:
        return True  # an omitted optional input
    if value.is_initializer() or value.const_value is not None:
        return True
    producer = value.producer()
    return (
        producer is not None
        and producer.op_type == "Constant"
        and producer.domain in ("", "ai.onnx")
    )


def describe(classes: tuple[str, ...]) -> str:
    words = [_CLASS_WORDS.get(c, c) for c in classes]
    if not words:
        return "no epilogue"
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def dims_of(value: ir.Value | None) -> tuple | None:
    """The shape as a tuple, symbolic dims kept: to compare two values' shapes, not to size one
    (``opfuse.ir.values.static_dims`` does that)."""
    return None if value is None or value.shape is None else tuple(value.shape)


def who(node: ir.Node) -> str:
    return f"{node.op_type} '{node.name}'" + (f" (domain {node.domain})" if node.domain else "")


def is_affine_pair(group: Group, v: ir.Node) -> bool:
    """Mul by a constant then Add/Sub of a constant: one per-channel scale-and-shift, the form a
    BatchNormalization with no linear producer takes. Every target runs it as one op (it ran as
    one BatchNormalization before canonicalization), so splitting it must not cost a kernel."""
    if len(group.nodes) != 1 or v.op_type not in ("Add", "Sub"):
        return False
    mul = group.nodes[0]
    return (
        mul.op_type == "Mul"
        and any(is_constant(i) for i in mul.inputs)
        and any(is_constant(i) for i in v.inputs)
    )


def is_residual(v: ir.Node, x: ir.Value) -> bool:
    """An arithmetic op whose other operand is a second full-size activation (a residual add)."""
    out_dims = dims_of(v.outputs[0]) if v.outputs else None
    return any(
        o is not None and o is not x and not is_constant(o) and dims_of(o) == out_dims
        for o in v.inputs
    )


def int_name(node: ir.Node) -> str:
    value = node.outputs[0] if node.op_type == "QuantizeLinear" else node.inputs[0]
    return value.dtype.name.lower() if value is not None and value.dtype is not None else "int8"
