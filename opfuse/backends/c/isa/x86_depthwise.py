"""int8 depthwise conv (multiplier 1, what depthwise_dsp.py writes) with AVX-512 (BW, VL): 16
output pixels of one channel per zmm, the portable C of depthwise_dsp.py in the ``#else``.

NCHW keeps a channel's plane contiguous, so the vector runs over pixels and every per-channel
constant is a broadcast. Per tap: the 16 input bytes under a mask of the lanes whose tap lies
inside the input (``vmovdqu8`` with a mask reads nothing outside it), sign-extended to int32,
``x - z_x`` on those lanes and 0 on the others (TFLite's padding contributes nothing), then
``vpdpwssd`` (VNNI) or ``vpmaddwd`` + add against the weight in the low int16 of each lane
(the high int16 of the weight is 0, so the sign bits of x's high half add nothing): exact int32
sums, so bit-exact with the portable C. Then ``opfuse_x86_rq16`` (the TFLite requantization in
vectors, x86_helpers.py) and a masked byte store, or the epilogue chain lane by lane.

Two ways over the plane:

* flat (stride 1 and as wide as the input): the output plane as one run of pixels ``q``; tap
  (kh, kw) reads ``x[q + (kh*dh - ph)*IW + kw*dw - pw]``. A tap's row is inside for ``q`` in one
  range (two compares), its column by the lane's column ``ow`` (kept per lane, advanced by
  16 mod OW per vector);
* by rows (stride 1 or 2): per output row, vectors of 16 columns; a tap row outside is skipped,
  the columns masked. Stride 2 loads 32 bytes under a mask of the even ones and keeps the low
  byte of each 16-bit pair.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.conv import ConvGeom
from opfuse.backends.c.ctype import INT32
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import bias_array, int_ctype, quant
from opfuse.backends.c.isa import x86_helpers as hx
from opfuse.backends.c.tensors import Params
from opfuse.ir.values import const
from opfuse.quant import ONNX, conv_scales, multipliers


def applies(g: ConvGeom, params: Params) -> bool:
    from opfuse.backends.c.int8.common import rounding

    flat = g.s == (1, 1) and g.ow == g.iw
    return rounding(params) != ONNX and (flat or (g.s[1] in (1, 2) and g.d[1] == 1))


def emit_depthwise_x86(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
                       g: ConvGeom) -> Callable[[CWriter], None] | None:
    """The AVX-512 branch (``#if ... #else``) into a writer, or None if it does not apply."""
    xq, wq, yq = quant(node.inputs[0], node, "input"), quant(node.inputs[1], node, "weight"), \
        quant(node.outputs[0], node, "output")
    if not applies(g, params) or np.any(wq.zero_point):
        return None
    taps = g.k[0] * g.k[1]
    arr = const(node.inputs[1]).astype(np.int64).reshape(g.c, taps)
    m, s = multipliers(conv_scales(xq, wq, yq, g.oc, "tflite"))
    if (m == np.iinfo(np.int32).min).any() or (s < -31).any() or (s > 31).any():
        return None
    wp = params.weight(f"{node.name}:x86dw", (arr & 0xFFFF).astype(np.int32).ravel(), INT32)
    bp = params.weight(f"{node.name}:x86dwb", bias_array(node, 2, g.oc).astype(np.int32), INT32)
    mp = params.weight(f"{node.name}:x86rqm", np.broadcast_to(m, (g.oc,)).copy(), INT32)
    sp = params.weight(f"{node.name}:x86rqs", np.broadcast_to(s, (g.oc,)).copy(), INT32)
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    yv = node.outputs[0]
    yct = int_ctype(yv, node)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    x = params.inp(node.inputs[0], node)
    y = params.out((pre or [node])[-1].outputs[0], node)
    flat = g.s == (1, 1) and g.ow == g.iw
    plane_in, plane_out = g.ih * g.iw, g.oh * g.ow

    def emit(w: CWriter) -> None:
        w.lines.append(f"#if {hx.Z512}")
        w.open("")
        w("const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, "
          "2, 1, 0);")
        w(f"const __m512i zxv = _mm512_set1_epi32({zx});")
        w("int32_t tmp[16] __attribute__((aligned(64)));")
        w("(void)tmp;")
        w.open(f"for (int n = 0; n < {g.n}; ++n)")
        w.open(f"for (int c = 0; c < {g.c}; ++c)")
        w(f"const int8_t *xc = {x} + (n*{g.c} + c)*{plane_in};")
        w(f"{yct.name} *yc = {y} + (n*{g.c} + c)*{plane_out};")
        w(f"const int32_t *wc = {wp} + c*{taps};")
        for t in range(taps):
            w(f"const __m512i w{t} = _mm512_set1_epi32(wc[{t}]);")
        w(" ".join(f"(void)w{t};" for t in range(taps)))  # a tap row may lie outside always
        w(f"const __m512i bv = _mm512_set1_epi32({bp}[c]);")
        w(f"const __m512i mv = _mm512_set1_epi32({mp}[c]), sv = _mm512_set1_epi32({sp}[c]);")
        if flat:
            _flat(w, g, plane_out)
        else:
            _rows(w, g)
        w("const __m512i r = opfuse_x86_rq16(acc, mv, sv, "
          f"{zy}, {yct.lo}, {yct.hi});")
        pix = "q0" if flat else "(oh*" + str(g.ow) + " + ow0)"
        if chain is None:
            w(f"_mm_mask_storeu_epi8(yc + {pix}, live, _mm512_cvtepi32_epi8(r));")
        else:
            w("_mm512_store_si512((void *)tmp, r);")
            w.open("for (int l = 0; l < 16; ++l)")
            w("if (!((live >> l) & 1)) break;")
            w(f"const int p = {pix} + l;")
            w("int32_t v = tmp[l];")
            coords = ["n", "c", f"p / {g.ow}", f"p % {g.ow}"]
            w(f"v = {chain.emit(w, 'v', coords if len(shape) == 4 else coords[:2] + coords[3:])};")
            w(f"yc[p] = ({yct.name})v;")
            w.close()
        _advance(w, g, flat)
        w.close()  # the vector loop
        if not flat:
            w.close()  # the row loop
        w.close()
        w.close()
        w.close()
        w.lines.append("#else")

    return emit


def _tap(w: CWriter, g: ConvGeom, kh: int, kw: int, mask: str, ptr: str) -> None:
    """acc += (x - z_x) * w of one tap over the lanes of ``mask``, x at ``ptr``."""
    t = kh * g.k[1] + kw
    if g.s[1] == 2:  # even bytes of 32 (rows only: a flat plane has stride 1)
        w(f"const __m512i v{t} = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi8("
          f"(__mmask32)_pdep_u32({mask}, 0x55555555u), {ptr}));")
        w(f"const __m512i x{t} = _mm512_srai_epi32(_mm512_slli_epi32(v{t}, 24), 24);")
    else:
        w(f"const __m512i x{t} = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8({mask}, {ptr}));")
    w(f"const __m512i d{t} = _mm512_maskz_sub_epi32({mask}, x{t}, zxv);")
    w("#if defined(__AVX512VNNI__)")
    w(f"acc = _mm512_dpwssd_epi32(acc, d{t}, w{t});")
    w("#else")
    w(f"acc = _mm512_add_epi32(acc, _mm512_madd_epi16(d{t}, w{t}));")
    w("#endif")


def _col_masks(w: CWriter, g: ConvGeom, col: str) -> None:
    """``mc<kw>``: the lanes whose tap column is inside the input (``col``: their column)."""
    (_, sw), (_, dw), (_, pw) = g.s, g.d, g.p
    for kw in range(g.k[1]):
        lo, hi = pw - kw * dw, g.iw + pw - kw * dw  # sw*ow in [lo, hi)
        conds = []
        if lo > 0:
            conds.append(f"_mm512_cmpge_epi32_mask({col}, _mm512_set1_epi32({-(-lo // sw)}))")
        if (g.ow - 1) * sw >= hi:
            conds.append(f"_mm512_cmplt_epi32_mask({col}, _mm512_set1_epi32({-(-hi // sw)}))")
        w(f"const __mmask16 mc{kw} = {' & '.join(['live', *conds])};")


def _flat(w: CWriter, g: ConvGeom, plane: int) -> None:
    w(f"__m512i ow = _mm512_set_epi32({', '.join(str(i % g.ow) for i in range(15, -1, -1))});")
    w("__m512i qv = iota;")
    w.open(f"for (int q0 = 0; q0 < {plane}; q0 += 16)")
    w(f"const __mmask16 live = q0 + 16 <= {plane} ? (__mmask16)0xFFFF : "
      f"(__mmask16)((1u << ({plane} - q0)) - 1);")
    _col_masks(w, g, "ow")
    (dh, dw), (ph, pw) = g.d, g.p
    w("__m512i acc = bv;")
    for kh in range(g.k[0]):
        lo, hi = max(0, ph - kh * dh), min(g.oh, g.ih + ph - kh * dh)
        if lo >= hi:
            continue
        conds = []
        if lo > 0:
            conds.append(f"_mm512_cmpge_epi32_mask(qv, _mm512_set1_epi32({lo * g.ow}))")
        if hi < g.oh:
            conds.append(f"_mm512_cmplt_epi32_mask(qv, _mm512_set1_epi32({hi * g.ow}))")
        w.open("")
        w(f"const __mmask16 mr = {' & '.join(['(__mmask16)0xFFFF', *conds])};")
        for kw in range(g.k[1]):
            off = (kh * dh - ph) * g.iw + kw * dw - pw
            _tap(w, g, kh, kw, f"(__mmask16)(mr & mc{kw})", f"xc + q0 + ({off})")
        w.close()


def _rows(w: CWriter, g: ConvGeom) -> None:
    (sh, sw), (dh, dw), (ph, pw) = g.s, g.d, g.p
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
    w("__m512i ow = iota;")
    w.open(f"for (int ow0 = 0; ow0 < {g.ow}; ow0 += 16)")
    w(f"const __mmask16 live = ow0 + 16 <= {g.ow} ? (__mmask16)0xFFFF : "
      f"(__mmask16)((1u << ({g.ow} - ow0)) - 1);")
    _col_masks(w, g, "ow")
    w("__m512i acc = bv;")
    for kh in range(g.k[0]):
        w.open("")
        w(f"const int ih = oh*{sh} + {kh * dh - ph};")
        w.open(f"if (ih >= 0 && ih < {g.ih})")
        w(f"const int8_t *xr = xc + ih*{g.iw} + ow0*{sw};")
        for kw in range(g.k[1]):
            _tap(w, g, kh, kw, f"mc{kw}", f"xr + ({kw * dw - pw})")
        w.close()
        w.close()


def _advance(w: CWriter, g: ConvGeom, flat: bool) -> None:
    if flat:
        w("qv = _mm512_add_epi32(qv, _mm512_set1_epi32(16));")
        w(f"ow = _mm512_add_epi32(ow, _mm512_set1_epi32({16 % g.ow}));")
        w(f"ow = _mm512_mask_sub_epi32(ow, _mm512_cmpge_epi32_mask(ow, _mm512_set1_epi32({g.ow})),"
          f" ow, _mm512_set1_epi32({g.ow}));")
    else:
        w("ow = _mm512_add_epi32(ow, _mm512_set1_epi32(16));")
