"""A residual Add/Sub epilogue (Conv [+ Relu/Clip] + Add [+ Relu/Clip]) in zmm vectors, for the row epilogue of
x86/conv.py: 16 pixels of one output channel, the other operand's 16 bytes loaded from its own
NCHW plane (same shape as the output), then TFLite's int8 ADD exactly as int8/chain.py writes it
per element: both inputs offset, shifted left by 20, requantized to twice the larger scale, summed,
requantized to the output, + z_out and clamped (a trailing Relu/Clip narrows the clamp). Every
step is ``opfuse_x86_rq16`` (x86/helpers.py), the same integers as ``opfuse_requant``."""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.int8.common import int_ctype, quant, rounding
from opfuse.backends.c.isa.x86.depthwise import fold_chain
from opfuse.backends.c.tensors import Params
from opfuse.ir.values import const
from opfuse.quant import TFLITE, add_params


@dataclass(frozen=True)
class Residual:
    ptr: str  # the other operand (NCHW, the output's shape)
    signed: bool
    first: bool  # the conv's value is the Add's input 0
    sub: bool
    z1: int
    z2: int
    zo: int
    p: dict
    lo: int
    hi: int
    vlo: int  # the clamps (Relu/Clip) on the conv's value before the Add
    vhi: int


def residual(pre: list[ir.Node], yv: ir.Value, node: ir.Node, params: Params) -> Residual | None:
    """The chain as a Residual, or None if it is not one (then the chain runs per element)."""
    k = next((i for i, n in enumerate(pre) if n.op_type in ("Add", "Sub")), None)
    if rounding(params) != TFLITE or k is None:
        return None
    (vlo, vhi), lead = fold_chain(pre[:k], yv, node, params, int_ctype(yv, node))
    if lead is not None:
        return None
    add, into = pre[k], (pre[k - 1].outputs[0] if k else yv)
    names = [v.name if v is not None else None for v in add.inputs]
    if len(names) != 2 or names.count(into.name) != 1:
        return None
    first = names[0] == into.name
    other = add.inputs[1 if first else 0]
    out = add.outputs[0]
    if const(other) is not None or dims(other, add) != dims(yv, node) or \
            dims(out, add) != dims(yv, node):
        return None
    oct_, rct = int_ctype(out, add), int_ctype(other, add)
    q = [quant(v, add) for v in (*add.inputs, out)]
    if any(x.scale.size != 1 for x in q) or oct_.name != int_ctype(yv, node).name:
        return None
    (lo, hi), rest = fold_chain(pre[k + 1:], out, add, params, oct_)
    if rest is not None:
        return None
    p = add_params(float(q[0].scale[0]), float(q[1].scale[0]), float(q[2].scale[0]))
    if any(not -31 <= p[k] <= 31 for k in ("s1", "s2", "so")):
        return None
    return Residual(params.inp(other, add), rct.name == "int8_t", first, add.op_type == "Sub",
                    int(q[0].zero_point[0]), int(q[1].zero_point[0]), int(q[2].zero_point[0]), p,
                    lo, hi, vlo, vhi)


def emit_residual_row(w: CWriter, r: Residual, acc: str, other: str, out: str, count: int) -> None:
    """``out[0..count)`` (bytes) from the conv's int32 values at ``acc`` and the other operand's
    bytes at ``other``, 16 at a time."""
    cvt = "_mm512_cvtepi8_epi32" if r.signed else "_mm512_cvtepu8_epi32"
    p = r.p
    w.open(f"for (int i = 0; i < {count}; i += 16)")
    w(f"const __mmask16 k = i + 16 <= {count} ? (__mmask16)0xFFFF : "
      f"(__mmask16)((1u << ({count} - i)) - 1);")
    w(f"const __m512i v = _mm512_min_epi32(_mm512_max_epi32(_mm512_maskz_loadu_epi32(k, {acc} + i),"
      f" _mm512_set1_epi32({r.vlo})), _mm512_set1_epi32({r.vhi}));")
    w(f"const __m512i u = {cvt}(_mm_maskz_loadu_epi8(k, {other} + i));")
    x, y = ("v", "u") if r.first else ("u", "v")
    rq = "opfuse_x86_rq16"
    wide = "INT32_MIN, INT32_MAX"
    for name, src, z, m, s in (("a", x, r.z1, p["m1"], p["s1"]), ("b", y, r.z2, p["m2"], p["s2"])):
        w(f"const __m512i {name} = {rq}(_mm512_slli_epi32(_mm512_sub_epi32({src}, "
          f"_mm512_set1_epi32({z})), {p['left_shift']}), _mm512_set1_epi32({m}), "
          f"_mm512_set1_epi32({s}), 0, {wide});")
    op = "_mm512_sub_epi32" if r.sub else "_mm512_add_epi32"
    w(f"const __m512i o = {rq}({op}(a, b), _mm512_set1_epi32({p['mo']}), "
      f"_mm512_set1_epi32({p['so']}), {r.zo}, {r.lo}, {r.hi});")
    w(f"_mm_mask_storeu_epi8({out} + i, k, _mm512_cvtepi32_epi8(o));")
    w.close()
