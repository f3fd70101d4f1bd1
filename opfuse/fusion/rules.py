"""Whether one node may join the kernel of its producer: the partitioner's rules, as data-driven checks.

A check returns None when the consumer may join, or a ``Refusal`` (a reason from ``REASONS`` and a
sentence naming both ops and the target). Checks run from the most structural to the most
target-specific, so the first refusal is the one a person should fix first: opaque op, graph output,
several consumers, dtype, layout change, dynamic shape, non-constant weights / target capability,
chain length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from opfuse.fusion.support import KernelSupport
from opfuse.ops import ACTIVATION, ARITH, CLAMP, OpKind, kind, op_info
from opfuse.quant import get_quant
from opfuse.targets import Target

CONVERSIONS = frozenset({"QuantizeLinear", "DequantizeLinear"})
POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})

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


def _dims(value: ir.Value | None) -> tuple | None:
    """The shape as a tuple, symbolic dims kept: to compare two values' shapes, not to size one
    (``opfuse.ir.values.static_dims`` does that)."""
    return None if value is None or value.shape is None else tuple(value.shape)


def _who(node: ir.Node) -> str:
    return f"{node.op_type} '{node.name}'" + (f" (domain {node.domain})" if node.domain else "")


def check_structure(
    p: ir.Node, v: ir.Node, x: ir.Value, group: Group, target: str
) -> Refusal | None:
    """Target-independent refusals for the edge p -(x)-> v, v joining p's kernel ``group``."""
    head = f"{v.op_type} cannot join {group.label} on {target}"
    for node in (p, v):
        if kind(node) == OpKind.OPAQUE:
            return Refusal(
                "opaque_op",
                f"{head}: {_who(node)} is an op opfuse does not know, so it runs as its own kernel",
            )
    outputs = [o for o in p.outputs if o is not None]
    for out in outputs:
        if out.is_graph_output():
            return Refusal(
                "graph_output", f"{head}: '{out.name}' is a graph output and must be stored"
            )
    for out in outputs:
        readers = out.consumers()
        if any(r is not v for r in readers):
            return Refusal(
                "multiple_consumers",
                f"{head}: '{out.name}' is read by {len(readers)} nodes, so it must be stored "
                "(opfuse does not recompute producers)",
            )
    out_v = v.outputs[0] if v.outputs else None
    for node in (p, v):
        if node.op_type in CONVERSIONS and node.domain in ("", "ai.onnx"):
            return Refusal(
                "dtype_mismatch",
                f"{head}: {_who(node)} converts between float and "
                f"{_int_name(node)}, so it runs as its own kernel",
            )
    if (
        out_v is not None
        and x.dtype is not None
        and out_v.dtype is not None
        and x.dtype != out_v.dtype
    ):
        return Refusal(
            "dtype_mismatch",
            f"{head}: {p.op_type} produces {x.dtype.name} but {v.op_type} produces {out_v.dtype.name}",
        )
    for node in (p, v):
        if kind(node) == OpKind.INJECTIVE:
            return Refusal(
                "layout_change",
                f"{head}: {node.op_type} moves data (a layout change), so it runs as its own kernel",
            )
    for value in (x, out_v):
        dims = _dims(value)
        if dims is not None and any(not isinstance(d, int) for d in dims):
            return Refusal("dynamic_shape", f"{head}: '{value.name}' has a dynamic shape {dims}")
    return None


def check_target(
    p: ir.Node, v: ir.Node, x: ir.Value, group: Group, target: Target
) -> Refusal | None:
    """Capability refusals: may the kernel ``group`` (ending in p) take v on ``target``?"""
    caps = target.fusion
    head = f"{v.op_type} cannot join {group.label} on {target.name}"
    vk = kind(v)
    epilogue = op_info(v).epilogue
    elementwise = vk in (OpKind.ELEMWISE, OpKind.BROADCAST)

    if group.stage == CLOSED:
        return Refusal(
            "not_supported_by_target",
            f"{head}: its kernels end after {p.op_type}; nothing fuses into its output",
        )
    if group.stage == ELEMWISE:
        if elementwise and caps.elementwise_chains:
            return None
        if is_affine_pair(group, v):
            return None
        if elementwise and epilogue in caps.elementwise_epilogue:
            return None
        what = (
            f"its elementwise kernels apply only {describe(caps.elementwise_epilogue)} after the op"
            if elementwise
            else f"{v.op_type} is not elementwise, and its elementwise kernels take only elementwise ops"
        )
        return Refusal("not_supported_by_target", f"{head}: {what}")
    if group.stage == POOL:
        if elementwise and epilogue in caps.pool_epilogue:
            return _operands(v, x, group, target, head)
        return Refusal(
            "not_supported_by_target",
            f"{head}: its pool kernels apply only {describe(caps.pool_epilogue)} after the pool",
        )
    # ANCHOR stage
    anchor = group.head
    if v.op_type in POOLS:
        if caps.anchor_pool:
            return None
        return Refusal(
            "not_supported_by_target",
            f"{head}: its {anchor.op_type} kernels cannot end with a pool",
        )
    if v.op_type == "BatchNormalization":
        weights = anchor.inputs[1] if len(anchor.inputs) > 1 else None
        if not is_constant(weights):
            return Refusal(
                "non_constant_weights",
                f"{head}: {anchor.op_type}'s weights '{weights.name}' are not constants, so "
                f"BatchNormalization cannot be folded into its output stage",
            )
        for param in v.inputs[1:]:
            if not is_constant(param):
                return Refusal(
                    "non_constant_weights",
                    f"{head}: its statistic '{param.name}' is not a constant, so it cannot be "
                    "folded into a per-channel scale and shift",
                )
    if not elementwise:
        what = (
            f"a kernel holds one anchor ({anchor.op_type} already)"
            if vk == OpKind.ANCHOR
            else f"its kernels fuse only an epilogue after {anchor.op_type}"
        )
        return Refusal("not_supported_by_target", f"{head}: {what}")
    if caps.residual_add and epilogue == ARITH and is_residual(v, x):
        return None
    if epilogue not in caps.anchor_epilogue:
        return Refusal(
            "not_supported_by_target",
            f"{head}: its kernels apply only {describe(caps.anchor_epilogue)} in the output stage",
        )
    return _operands(v, x, group, target, head)


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
    out_dims = _dims(v.outputs[0]) if v.outputs else None
    return any(
        o is not None and o is not x and not is_constant(o) and _dims(o) == out_dims
        for o in v.inputs
    )


def _operands(v: ir.Node, x: ir.Value, group: Group, target: Target, head: str) -> Refusal | None:
    """An epilogue's other operands must be constants, unless the target reads a second activation."""
    out_dims = _dims(v.outputs[0]) if v.outputs else None
    for operand in v.inputs:
        if operand is None or operand is x or is_constant(operand):
            continue
        if target.fusion.residual_add:
            continue
        if op_info(v).epilogue == ARITH and _dims(operand) == out_dims:
            return Refusal(
                "not_supported_by_target",
                f"{head}: its kernels cannot read a second activation ('{operand.name}', a residual "
                f"{v.op_type}) in the output stage",
            )
        return Refusal(
            "non_constant_weights",
            f"{head}: {v.op_type}'s operand '{operand.name}' is not a constant, and its kernels "
            "read no second tensor in the output stage",
        )
    return None


def check_quant(
    p: ir.Node, v: ir.Node, x: ir.Value, group: Group, target: Target
) -> Refusal | None:
    """An int8 edge p -(x)-> v: v's own requantization clamp always joins (it is the kernel's
    output clamp); anything else needs a target whose int8 kernels requantize once at the end
    (``int8_requantize_once``), since x's requantization disappears inside the kernel."""
    params = get_quant(x)
    if params is None:
        return None
    out_v = v.outputs[0] if v.outputs else None
    if op_info(v).epilogue == CLAMP and get_quant(out_v) == params:
        return None
    if target.fusion.int8_requantize_once:
        return None
    return Refusal(
        "not_supported_by_target",
        f"{v.op_type} cannot join {group.label} on {target.name}: its int8 kernels requantize "
        f"every op's output ('{x.name}' is int8), so only a clamp on the same parameters folds "
        "into the requantization (int8_requantize_once = false)",
    )


def _int_name(node: ir.Node) -> str:
    value = node.outputs[0] if node.op_type == "QuantizeLinear" else node.inputs[0]
    return value.dtype.name.lower() if value is not None and value.dtype is not None else "int8"


def check_backend(
    v: ir.Node, group: Group, target: Target, support: KernelSupport
) -> Refusal | None:
    """The code generator must be able to write the kernel ``group`` + v (``support.py``)."""
    why = support.why_not_kernel([*group.nodes, v])
    if why is None:
        return None
    return Refusal(
        "not_supported_by_target",
        f"{v.op_type} cannot join {group.label} on {target.name}: {support.backend} writes no "
        f"such kernel ({why})",
    )


def check_length(v: ir.Node, group: Group, target: Target) -> Refusal | None:
    limit = target.fusion.max_chain
    if len(group.nodes) >= limit:
        return Refusal(
            "chain_limit",
            f"{v.op_type} cannot join {group.label} on {target.name}: the kernel already holds "
            f"{len(group.nodes)} ops, the most it allows (max_chain = {limit})",
        )
    return None
