"""A conv's epilogue that is a residual Add / Sub (then clamps) of a whole int8 tensor of the
conv's output shape (a cascade member's, int8/cascade.py: the block input stays whole in the
arena), for the ISA's vector output stage (``IsaKernels.store_tile``'s ``add``): the other
operand's row, both inputs' zero points, TFLite's add_params and the range after the clamps.
The integers are the chain's (int8/chain.py ``Chain8``: the same rescalings in the same order)."""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from opfuse.backends.c.cgen import dims
from opfuse.backends.c.int8.chain import clamp_span, scale_zero
from opfuse.backends.c.int8.common import int_ctype, quant, rounding
from opfuse.backends.c.tensors import Params
from opfuse.ir.values import const
from opfuse.quant import ONNX, add_params


@dataclass(frozen=True)
class ResidualAdd:
    """``other``: C pointer to the other operand's values of the tile (contiguous pixels);
    ``first``: the conv's value is the Add's input 0; ``p``: add_params; ``zo``: the Add's
    output zero point; ``lo``, ``hi``: the range after the clamps that follow."""

    other: str
    first: bool
    z_conv: int
    z_other: int
    p: dict
    sub: bool
    zo: int
    lo: int
    hi: int


def residual_add(conv_out: ir.Value, epilogue: list[ir.Node], params: Params,
                 row: str) -> ResidualAdd | None:
    """The epilogue as a ResidualAdd (``row``: the C offset of the tile's first pixel within a
    channel plane of the other operand, ``oc`` its channel), None where it is not one."""
    if not epilogue or rounding(params) == ONNX:
        return None
    head = epilogue[0]
    ins = head.inputs
    if head.op_type not in ("Add", "Sub") or len(ins) != 2 or any(v is None for v in ins):
        return None
    names = [v.name for v in ins]
    if names.count(conv_out.name) != 1:
        return None
    first = names[0] == conv_out.name
    other = ins[1 if first else 0]
    shape = dims(conv_out, head)
    if (const(other) is not None or len(shape) != 4 or shape[0] != 1
            or dims(other, head) != shape
            or any(int_ctype(v, head).name != "int8_t" for v in (*ins, head.outputs[0]))):
        return None
    span = clamp_span(epilogue[1:], params)
    if span is None:
        return None
    (s1, z1), (s2, z2) = scale_zero(head, 0), scale_zero(head, 1)
    qo = quant(head.outputs[0], head)
    plane = shape[2] * shape[3]
    ptr = params.inp(other, head)
    return ResidualAdd(f"{ptr} + oc*{plane} + {row}", first, z1 if first else z2,
                       z2 if first else z1, add_params(s1, s2, float(qo.scale[0])),
                       head.op_type == "Sub", int(qo.zero_point[0]), *span)
