"""Target-capability, int8 and C-emittability constraints: what the target file's ``[fusion]``
table and the code generator allow (docs/architecture.md, "Named constraints"), in the order they
run after the structural ones."""

from __future__ import annotations

import onnx_ir as ir

from opfuse.fusion.constraints import DTYPE, EMITTABLE, TARGET, Edge, Fields, constraint
from opfuse.fusion.rules import (
    ANCHOR,
    CLOSED,
    ELEMWISE,
    POOL,
    POOLS,
    describe,
    dims_of,
    is_affine_pair,
    is_constant,
    is_residual,
)
from opfuse.ops import ARITH, CLAMP, OpKind, kind, op_info
from opfuse.quant import get_quant

NOT_SUPPORTED = "not_supported_by_target"


def _elementwise(v: ir.Node) -> bool:
    return kind(v) in (OpKind.ELEMWISE, OpKind.BROADCAST)


def _classes(classes: tuple[str, ...]) -> Fields:
    return {"classes": describe(classes)}


@constraint(TARGET, NOT_SUPPORTED, "its kernels end after {producer}; nothing fuses into its output")
def constraint_open_kernel(e: Edge) -> Fields | None:
    return {} if e.group.stage == CLOSED else None


@constraint(TARGET, NOT_SUPPORTED, "its elementwise kernels apply only {classes} after the op")
def constraint_elementwise_epilogue(e: Edge) -> Fields | None:
    caps = e.target.fusion
    if e.group.stage != ELEMWISE or not _elementwise(e.v) or caps.elementwise_chains:
        return None
    if is_affine_pair(e.group, e.v) or op_info(e.v).epilogue in caps.elementwise_epilogue:
        return None
    return _classes(caps.elementwise_epilogue)


@constraint(TARGET, NOT_SUPPORTED,
            "{consumer} is not elementwise, and its elementwise kernels take only elementwise ops")
def constraint_elementwise_only(e: Edge) -> Fields | None:
    if e.group.stage != ELEMWISE or _elementwise(e.v) or is_affine_pair(e.group, e.v):
        return None
    return {}


@constraint(TARGET, NOT_SUPPORTED, "its pool kernels apply only {classes} after the pool")
def constraint_pool_epilogue(e: Edge) -> Fields | None:
    caps = e.target.fusion
    if e.group.stage != POOL:
        return None
    if _elementwise(e.v) and op_info(e.v).epilogue in caps.pool_epilogue:
        return None
    return _classes(caps.pool_epilogue)


def _after_anchor(e: Edge) -> bool:
    """v asks to join an anchor's kernel as an epilogue (not as its pool)."""
    return e.group.stage == ANCHOR and e.v.op_type not in POOLS


@constraint(TARGET, NOT_SUPPORTED, "its {anchor} kernels cannot end with a pool")
def constraint_anchor_pool(e: Edge) -> Fields | None:
    caps = e.target.fusion
    return {} if e.group.stage == ANCHOR and e.v.op_type in POOLS and not caps.anchor_pool else None


@constraint(TARGET, "non_constant_weights",
            "{anchor}'s weights '{value}' are not constants, so BatchNormalization cannot be "
            "folded into its output stage")
def constraint_bn_anchor_weights(e: Edge) -> Fields | None:
    if not _after_anchor(e) or e.v.op_type != "BatchNormalization":
        return None
    anchor = e.group.head
    weights = anchor.inputs[1] if len(anchor.inputs) > 1 else None
    return None if is_constant(weights) else {"value": weights.name}


@constraint(TARGET, "non_constant_weights",
            "its statistic '{value}' is not a constant, so it cannot be folded into a per-channel "
            "scale and shift")
def constraint_bn_statistics(e: Edge) -> Fields | None:
    if not _after_anchor(e) or e.v.op_type != "BatchNormalization":
        return None
    param = next((i for i in e.v.inputs[1:] if not is_constant(i)), None)
    return None if param is None else {"value": param.name}


@constraint(TARGET, NOT_SUPPORTED, "a kernel holds one anchor ({anchor} already)")
def constraint_one_anchor(e: Edge) -> Fields | None:
    return {} if _after_anchor(e) and kind(e.v) == OpKind.ANCHOR else None


@constraint(TARGET, NOT_SUPPORTED, "its kernels fuse only an epilogue after {anchor}")
def constraint_anchor_epilogue_only(e: Edge) -> Fields | None:
    if not _after_anchor(e) or _elementwise(e.v) or kind(e.v) == OpKind.ANCHOR:
        return None
    return {}


def _residual_joins(e: Edge) -> bool:
    """A residual Add the target's kernels read as a second activation: no further checks."""
    caps = e.target.fusion
    return caps.residual_add and op_info(e.v).epilogue == ARITH and is_residual(e.v, e.x)


@constraint(TARGET, NOT_SUPPORTED, "its kernels apply only {classes} in the output stage")
def constraint_anchor_epilogue(e: Edge) -> Fields | None:
    caps = e.target.fusion
    if not _after_anchor(e) or _residual_joins(e):
        return None
    return None if op_info(e.v).epilogue in caps.anchor_epilogue else _classes(caps.anchor_epilogue)


def _second_operand(e: Edge) -> ir.Value | None:
    """The first operand of an epilogue that is neither x nor a constant, when the kernel reads
    no second tensor (pool and anchor kernels, ``residual_add = false``)."""
    if e.target.fusion.residual_add or not (e.group.stage == POOL or _after_anchor(e)):
        return None
    return next((o for o in e.v.inputs if o is not None and o is not e.x and not is_constant(o)),
                None)


@constraint(TARGET, NOT_SUPPORTED,
            "its kernels cannot read a second activation ('{value}', a residual {consumer}) in "
            "the output stage")
def constraint_no_second_activation(e: Edge) -> Fields | None:
    operand = _second_operand(e)
    if operand is None or op_info(e.v).epilogue != ARITH:
        return None
    out_dims = dims_of(e.v.outputs[0]) if e.v.outputs else None
    return {"value": operand.name} if dims_of(operand) == out_dims else None


@constraint(TARGET, "non_constant_weights",
            "{consumer}'s operand '{value}' is not a constant, and its kernels read no second "
            "tensor in the output stage")
def constraint_constant_operands(e: Edge) -> Fields | None:
    operand = _second_operand(e)
    return None if operand is None else {"value": operand.name}


@constraint(DTYPE, NOT_SUPPORTED,
            "its int8 kernels requantize every op's output ('{value}' is int8), so only a clamp on "
            "the same parameters folds into the requantization (int8_requantize_once = false)")
def constraint_int8_requantize(e: Edge) -> Fields | None:
    """v's own requantization clamp always joins (it is the kernel's output clamp); anything else
    needs a target whose int8 kernels requantize once at the end, since x's requantization
    disappears inside the kernel."""
    params = get_quant(e.x)
    if params is None or e.target.fusion.int8_requantize_once:
        return None
    out_v = e.v.outputs[0] if e.v.outputs else None
    if op_info(e.v).epilogue == CLAMP and get_quant(out_v) == params:
        return None
    return {"value": e.x.name}


@constraint(EMITTABLE, NOT_SUPPORTED, "{backend} writes no such kernel ({why})")
def constraint_emittable(e: Edge) -> Fields | None:
    """The code generator must be able to write the kernel ``group`` + v (``support.py``)."""
    why = e.support.why_not_kernel([*e.group.nodes, e.v])
    return None if why is None else {"backend": e.support.backend, "why": why}


@constraint(TARGET, "chain_limit",
            "the kernel already holds {length} ops, the most it allows (max_chain = {limit})")
def constraint_chain_length(e: Edge) -> Fields | None:
    limit = e.target.fusion.max_chain
    length = len(e.group.nodes)
    return {"length": length, "limit": limit} if length - e.free >= limit else None


CAPABILITY = (
    constraint_open_kernel,
    constraint_elementwise_epilogue,
    constraint_elementwise_only,
    constraint_pool_epilogue,
    constraint_anchor_pool,
    constraint_bn_anchor_weights,
    constraint_bn_statistics,
    constraint_one_anchor,
    constraint_anchor_epilogue_only,
    constraint_anchor_epilogue,
    constraint_no_second_activation,
    constraint_constant_operands,
)
DTYPES = (constraint_int8_requantize,)
BACKEND = (constraint_emittable, constraint_chain_length)
