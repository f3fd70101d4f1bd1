"""A residual Add/Sub epilogue (Conv [+ Relu/Clip] + Add [+ Relu/Clip]) in zmm vectors, two ways:
in x86/lanes.py's pixel lanes, 16 pixels of one output channel with the other operand's 16 bytes
loaded from its own NCHW plane (``emit_residual_lanes``); or in the register block itself, 16
channels of one pixel with the other operand's bytes transposed from 16 NCHW planes into pixel
vectors (``emit_residual_block``, before x86/core.py's transposing store). A Residual exists only
under TFLite's rounding, where the requantization is in vectors, so x86/conv.py's zmm branch
always takes one of the two (a row epilogue never sees it). Either way TFLite's
int8 ADD exactly as int8/chain.py writes it per element: both inputs offset, shifted left by 20, requantized to twice the larger scale, summed,
requantized to the output, + z_out and clamped (a trailing Relu/Clip narrows the clamp). Every
step is ``opfuse_x86_rq16`` (x86/helpers.py), the same integers as ``opfuse_requant``, or its
32-bit split (``input_rescale``). Where x86/residual_fast.py proves its shorter form equal to
TFLite's ADD on every pair of input bytes of the layer, that form is written instead, and the
pixel-lane epilogue narrows with ``vpmovsdb``."""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.int8.common import int_ctype, quant, rounding
from opfuse.backends.c.isa.x86.depthwise import fold_chain
from opfuse.backends.c.isa.x86.residual_fast import AddLayer, FastAdd, emit_fast, prove
from opfuse.backends.c.isa.x86.vec import ZMM, Vec
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
    tlo: int  # the conv's type's range: its value is clamped to it already
    thi: int
    fast: FastAdd | None = None  # the short form proved for this layer (x86/residual_fast.py)


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
    z = [int(x.zero_point[0]) for x in q]
    sub, yct = add.op_type == "Sub", int_ctype(yv, node)
    signed = [int_ctype(v, add).name == "int8_t" for v in add.inputs]
    fast = prove(AddLayer(p, z[0], z[1], z[2], lo, hi, sub, (signed[0], signed[1]),
                          oct_.name == "int8_t"))
    return Residual(params.inp(other, add), rct.name == "int8_t", first, sub, z[0], z[1], z[2], p,
                    lo, hi, vlo, vhi, yct.lo, yct.hi, fast)


def input_rescale(w: CWriter, name: str, src: str, z: int, m: int, s: int, left: int,
                  v: Vec = ZMM) -> None:
    """``name`` = MultiplyByQuantizedMultiplierSmallerThanOneExp((src - z) << left, m, s), the
    Add's input rescale. ``d = src - z`` is a byte difference (|d| <= 255), so with ``left`` >= 15
    and no left shift in ``s`` the doubling high multiply ``floor((d*m*2^left + 2^30) / 2^31)``
    splits exactly into 32-bit products: ``m = mh*2^16 + ml`` gives
    ``d*mh*2^(left-15) + floor((d*ml + 2^(30-left)) / 2^(31-left))`` (``d*mh*2^16`` is a multiple
    of ``2^(31-left)``; |d*ml| < 2^24, |d*mh*2^(left-15)| < 2^31 for left <= 20), then the
    rounding divide by 2^-s with ties away from zero. Otherwise ``opfuse_x86_rq16`` (``rq8``)."""
    t, p = v.t, v.p
    d = f"{p}sub_epi32({src}, {p}set1_epi32({z}))"
    if not 15 <= left <= 20 or s > 0 or not 0 < m < 2**31:
        w(f"const {t} {name} = {v.rq}({p}slli_epi32({d}, {left}), "
          f"{p}set1_epi32({m}), {p}set1_epi32({s}), 0, INT32_MIN, INT32_MAX);")
        return
    mh, ml, e = m >> 16, m & 0xFFFF, -s
    w(f"const {t} {name}d = {d};")
    w(f"const {t} {name}h = {p}add_epi32({p}slli_epi32({p}mullo_epi32({name}d, "
      f"{p}set1_epi32({mh})), {left - 15}), {p}srai_epi32({p}add_epi32("
      f"{p}mullo_epi32({name}d, {p}set1_epi32({ml})), {p}set1_epi32({1 << (30 - left)})"
      f"), {31 - left}));")
    if e == 0:
        w(f"const {t} {name} = {name}h;")
        return
    round_shift(w, name, f"{name}h", e, v)


def round_shift(w: CWriter, name: str, h: str, e: int, v: Vec = ZMM) -> None:
    """``name`` = TFLite's RoundingDivideByPOT(``h``, ``e``) (ties away from zero) for ``e`` > 0
    as ``(h + 2^(e-1) - (h < 0)) >> e``: for h >= 0 that is floor((h + 2^(e-1)) / 2^e), +1 when
    the remainder is at least half; for h < 0 floor((h + 2^(e-1) - 1) / 2^e), +1 only above
    half. Exact while the sum cannot wrap: |h| < 2^30, which every caller's bound keeps (an
    input rescale |h| < 2^28, their sum's high product < 2^29)."""
    p = v.p
    w(f"const {v.t} {name} = {p}srai_epi32({p}add_epi32({h}, {p}add_epi32("
      f"{p}srai_epi32({h}, 31), {p}set1_epi32({1 << (e - 1)}))), {e});")


def add_values(w: CWriter, r: Residual, v: str, u: str, out: str, narrow: bool = False,
               vec: Vec = ZMM, sat: bool = False) -> None:
    """``out`` (int32 vector of ``vec``, final; with ``narrow`` and a proved short form its 16
    bytes, ``__m128i``) from the conv's int32 values ``v`` (clamped to its type) and the other
    operand's ``u``; ``sat``: the caller packs to int8 with signed saturation."""
    p, t, q = r.p, vec.t, vec.p
    if (r.vlo, r.vhi) != (r.tlo, r.thi):  # a Relu/Clip before the Add
        w(f"const {t} cv_ = {q}min_epi32({q}max_epi32({v}, "
          f"{q}set1_epi32({r.vlo})), {q}set1_epi32({r.vhi}));")
    else:
        w(f"const {t} cv_ = {v};")
    x, y = ("cv_", u) if r.first else (u, "cv_")
    if r.fast is not None:
        emit_fast(w, r.fast, x, y, out, narrow, vec, sat)
        return
    for name, src, z, m, s in (("a_", x, r.z1, p["m1"], p["s1"]), ("b_", y, r.z2, p["m2"], p["s2"])):
        input_rescale(w, name, src, z, int(m), int(s), int(p["left_shift"]), vec)
    op = f"{q}sub_epi32" if r.sub else f"{q}add_epi32"
    so, mo = int(p["so"]), int(p["mo"])
    if so > 0 or not 0 < mo < 2**31:
        w(f"{out} = {vec.rq}({op}(a_, b_), {q}set1_epi32({mo}), {q}set1_epi32({so}), "
          f"{r.zo}, {r.lo}, {r.hi});")
        return
    # the output's requantization of a sum |x| < 2^29 with no left shift: the doubling high
    # product in 64 bits (as opfuse_x86_rq16), then round_shift
    w(f"const {t} o_x = {op}(a_, b_), o_m = {q}set1_epi32({mo}), "
      f"o_r = {vec.set64}((long long)1 << 30);")
    even = f"{q}srli_epi64({q}add_epi64({q}mul_epi32(o_x, o_m), o_r), 31)"
    odd = f"{q}slli_epi64({q}add_epi64({q}mul_epi32({q}srli_epi64(o_x, 32), o_m), o_r), 1)"
    w(f"const {t} o_h = {vec.blend(even, odd)};")
    if -so:
        round_shift(w, "o_q", "o_h", -so, vec)
    else:
        w(f"const {t} o_q = o_h;")
    o = f"{q}add_epi32(o_q, {q}set1_epi32({r.zo}))"
    sat = sat and (r.tlo, r.thi) == (-128, 127)  # the packs' saturation: no int8 bound written
    o = o if sat and r.lo == -128 else f"{q}max_epi32({o}, {q}set1_epi32({r.lo}))"
    w(f"{out} = {o if sat and r.hi == 127 else f'{q}min_epi32({o}, {q}set1_epi32({r.hi}))'};")


def emit_residual_lanes(w: CWriter, r: Residual, v: str, other: str, k: str) -> str:
    """The Add's 16 output bytes (a C ``__m128i``) from ``v`` (zmm int32, 16 pixels of one
    channel, requantized); the other operand's 16 bytes at ``other``, the lanes ``k`` loaded
    (x86/lanes.py)."""
    cvt = "_mm512_cvtepi8_epi32" if r.signed else "_mm512_cvtepu8_epi32"
    w(f"const __m512i u = {cvt}(_mm_maskz_loadu_epi8({k}, {other}));")
    if r.fast is not None:
        w("__m128i o8;")
        add_values(w, r, v, "u", "o8", narrow=True)
        return "o8"
    add_values(w, r, v, "u", v)
    return f"_mm512_cvtepi32_epi8({v})"


def emit_residual_block(w: CWriter, r: Residual, other: str, plane: int, ocg: int, p: int) -> None:
    """``tmp[0..p)[0..ocg)`` (the conv's requantized int32 values of ``p`` <= 8 pixels) made the
    Add's final values in place; ``other`` is the other operand at the block's first pixel of
    channel 0 of the group, its channels ``plane`` bytes apart. Per 16 channels: 16 rows of
    ``p`` bytes transposed by SSE2 unpacks into ``p`` vectors of 16 channels."""
    cvt = "_mm512_cvtepi8_epi32" if r.signed else "_mm512_cvtepu8_epi32"
    mask = f"(__mmask16){(1 << p) - 1}"

    def group(o16: str, count: int) -> None:
        for c in range(16):
            w(f"const __m128i r{c} = _mm_maskz_loadu_epi8({mask}, ob_ + ({o16} + {c})*{plane});"
              if c < count else f"const __m128i r{c} = _mm_setzero_si128();")
        for j in range(8):  # a_j: pixels 0-7 x channels 2j, 2j+1
            w(f"const __m128i a{j} = _mm_unpacklo_epi8(r{2 * j}, r{2 * j + 1});")
        for j in range(4):  # b_j: channels 4j..4j+3 of pixels 0-3 (lo) and 4-7 (hi)
            w(f"const __m128i bl{j} = _mm_unpacklo_epi16(a{2 * j}, a{2 * j + 1}), "
              f"bh{j} = _mm_unpackhi_epi16(a{2 * j}, a{2 * j + 1});")
        for h in ("l", "h"):  # channels 0-7 / 8-15 of pixel pairs
            for j in (0, 2):
                w(f"const __m128i e{h}{j} = _mm_unpacklo_epi32(b{h}{j}, b{h}{j + 1}), "
                  f"e{h}{j + 1} = _mm_unpackhi_epi32(b{h}{j}, b{h}{j + 1});")
        for q in range(p):
            h, pair = ("l", q) if q < 4 else ("h", q - 4)
            lo, hi = f"e{h}{pair // 2}", f"e{h}{pair // 2 + 2}"
            fn = "_mm_unpacklo_epi64" if pair % 2 == 0 else "_mm_unpackhi_epi64"
            w.open("")
            w(f"const __m512i u = {cvt}({fn}({lo}, {hi}));")
            w("__m512i o;")
            add_values(w, r, f"_mm512_load_si512((const void *)(tmp[{q}] + {o16}))", "u", "o")
            w(f"_mm512_store_si512((void *)(tmp[{q}] + {o16}), o);")
            w.close()
        w(" ".join(f"(void)e{h}{j};" for h in "lh" for j in range(4)))

    w.open("")
    w(f"const uint8_t *ob_ = (const uint8_t *)({other});")
    if ocg >= 16:
        w.open(f"for (int o16 = 0; o16 < {ocg - ocg % 16}; o16 += 16)")
        group("o16", 16)
        w.close()
    if ocg % 16:
        w.open("")
        group(str(ocg - ocg % 16), ocg % 16)
        w.close()
    w.close()
