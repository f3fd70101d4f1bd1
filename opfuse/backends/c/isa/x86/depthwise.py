"""int8 depthwise conv (multiplier 1, what depthwise_dsp.py writes) with AVX-512 (BW, VL): 16
output pixels of one channel per zmm, the portable C of depthwise_dsp.py in the ``#else``.

NCHW keeps a channel's plane contiguous, so the vector runs over pixels and every per-channel
constant is a broadcast. Per tap row and quad of taps along it (kw = 4j .. 4j+3): the window of
input bytes the 16 pixels read (a masked load: nothing outside the plane or row is touched),
as u8 (x ^ 0x80), spread so lane l holds its 4 taps' bytes (``vpermb``, or ``vpermd`` +
``vpshufb`` without VBMI), every byte whose tap lies outside the input replaced by u8(z_x),
then one ``vpdpbusd`` against the quad's 4 weights (0 past the row's last tap). As in
x86/core.py, ``-(128 + z_x) * sum(w)`` is folded into the bias, so a padded tap adds nothing
(TFLite's padding), and the int32 sums equal the portable C's: bit-exact. Then
``opfuse_x86_rq16`` (the TFLite requantization in vectors, x86/helpers.py) and a masked byte
store, or the epilogue chain lane by lane.

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
from opfuse.backends.c.ctype import INT8, INT32, UINT8
from opfuse.backends.c.int8.chain import CLAMP_OPS, Chain8
from opfuse.backends.c.int8.common import bias_array, clamp_bounds, int_ctype, quant, rounding
from opfuse.backends.c.isa.x86 import helpers as hx
from opfuse.backends.c.isa.x86.depthwise_avx2 import STAGE_LIMIT as AVX2_STAGE
from opfuse.backends.c.isa.x86.depthwise_avx2 import emit_avx2, staged
from opfuse.backends.c.isa.x86.depthwise_vbmi import emit_dw_vbmi
from opfuse.backends.c.tensors import Params
from opfuse.ir.values import const
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.kernelplan.dw8 import is_flat, plan_dw, rows_inside, uses_dw_vectors
from opfuse.quant import ONNX, conv_scales, multipliers


def applies(g: ConvGeom, params: Params) -> bool:
    return rounding(params) != ONNX and uses_dw_vectors(g)


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
    kq = -(-g.k[1] // 4)  # quads of taps along a row
    wq4 = np.zeros((g.c, g.k[0], kq * 4), np.int64)
    wq4[:, :, : g.k[1]] = arr.reshape(g.c, g.k[0], g.k[1])
    wp = params.weight(f"{node.name}:x86dw4", wq4.astype(np.int8).ravel(), INT8)
    zx0 = int(xq.zero_point[0])
    bias = bias_array(node, 2, g.oc) - (zx0 + 128) * arr.sum(axis=1)
    bp = params.weight(f"{node.name}:x86dwb", ((bias + 2**31) % 2**32 - 2**31).astype(np.int32),
                       INT32)
    # what a tap row wholly outside the input adds (its taps read u(z_x)), to cancel its share
    # of the bias correction when it is skipped
    rowpad = (zx0 + 128) * arr.reshape(g.c, g.k[0], g.k[1]).sum(axis=2)
    pp = params.weight(f"{node.name}:x86dwp", ((rowpad + 2**31) % 2**32 - 2**31).astype(
        np.int32).ravel(), INT32)
    mp = params.weight(f"{node.name}:x86rqm", np.broadcast_to(m, (g.oc,)).copy(), INT32)
    sp = params.weight(f"{node.name}:x86rqs", np.broadcast_to(s, (g.oc,)).copy(), INT32)
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    yv = node.outputs[0]
    yct = int_ctype(yv, node)
    (lo, hi), chain = fold_chain(pre, yv, node, params, yct)
    x = params.inp(node.inputs[0], node)
    y = params.out((pre or [node])[-1].outputs[0], node)
    flat = is_flat(g)
    vbmi = plan_dw(g, kq) if chain is None else None
    # every sum within 2^30 and every shift a right shift: the short rounding (opfuse_x86_rq16r)
    bound = np.abs(bias) + 255 * np.abs(arr).sum(axis=1)
    short = bool((bound < 2**30).all() and (np.broadcast_to(s, (g.oc,)) < 0).all())
    tab = None if vbmi is None else params.weight(f"{node.name}:x86dwt", vbmi.tables.ravel(), UINT8)
    plane_in, plane_out = g.ih * g.iw, g.oh * g.ow

    def channel(w: CWriter, i: int) -> None:
        """Channel ``c + i`` of the chunk: the taps, requantization, store."""
        w.open("")
        w(f"const int ci = c + {i};")
        w(f"const int8_t *xc = {x} + (n*{g.c} + ci)*{plane_in};")
        w(f"{yct.name} *yc = {y} + (n*{g.c} + ci)*{plane_out};")
        w(f"const uint8_t *wc = (const uint8_t *)({wp}) + ci*{g.k[0] * kq * 4};")
        w(f"const int32_t *pc = {pp} + ci*{g.k[0]};")
        w("(void)pc; (void)xc;")
        w(f"__m512i acc0 = _mm512_set1_epi32({bp}[ci]), acc1 = _mm512_setzero_si512(), "
          "acc2 = _mm512_setzero_si512();")
        for kh in range(g.k[0]):
            acc = f"acc{kh % ACCS}"
            pad = f"{acc} = _mm512_add_epi32({acc}, _mm512_set1_epi32(pc[{kh}]));"
            if flat and kh not in rows_in:
                w(pad + "  /* a tap row never inside */")
                continue
            w.open("" if flat else f"if (in{kh})")
            for j in range(kq):
                t = kh * kq + j
                ptr = f"xc + q0 + ({_off(g, kh, j)})" if flat else \
                    f"xc + ih{kh}*{g.iw} + ow0*{g.s[1]} + {4 * j - g.p[1]}"
                load = "_mm512_castsi256_si512(_mm256_maskz_loadu_epi8" if g.s[1] == 1 else \
                    "(_mm512_maskz_loadu_epi8"
                w(f"const __m512i s{t} = _mm512_xor_si512(opfuse_x86_spread({load}(lm{t}, {ptr})),"
                  " spa, spb), fl);")
                valid = f"re{kh} & bm{j}" if flat else f"bm{j}"
                w(f"{acc} = opfuse_x86_dot16({acc}, _mm512_mask_blend_epi8({valid}, padv, s{t}), "
                  f"_mm512_set1_epi32(opfuse_x86_ld32(wc + {4 * t})));")
            w.close("" if flat else f" else {pad}  /* a padded row */")
        w("const __m512i acc = _mm512_add_epi32(acc0, _mm512_add_epi32(acc1, acc2));")
        w(f"const __m512i r = opfuse_x86_rq16(acc, _mm512_set1_epi32({mp}[ci]), "
          f"_mm512_set1_epi32({sp}[ci]), {zy}, {lo}, {hi});")
        pix = "q0" if flat else f"(oh*{g.ow} + ow0)"
        if chain is None:
            w(f"_mm_mask_storeu_epi8(yc + {pix}, live, _mm512_cvtepi32_epi8(r));")
        else:
            w("int32_t tmp[16] __attribute__((aligned(64)));")
            w("_mm512_store_si512((void *)tmp, r);")
            w.open("for (int l = 0; l < 16; ++l)")
            w("if (!((live >> l) & 1)) break;")
            w(f"const int p = {pix} + l;")
            w("int32_t v = tmp[l];")
            w(f"v = {chain.emit(w, 'v', ['n', 'ci', f'p / {g.ow}', f'p % {g.ow}'])};")
            w(f"yc[p] = ({yct.name})v;")
            w.close()
        w.close()

    rows_in = rows_inside(g)

    def block(w: CWriter, cb: int) -> None:
        """Channels ``c .. c+cb-1``: the masks of each chunk once, then each channel."""
        if flat:
            w(f"__m512i ow = _mm512_set_epi32("
              f"{', '.join(str(i % g.ow) for i in range(15, -1, -1))});")
            w("__m512i qv = iota;")
            w.open(f"for (int q0 = 0; q0 < {plane_out}; q0 += 16)")
            w(f"const __mmask16 live = q0 + 16 <= {plane_out} ? (__mmask16)0xFFFF : "
              f"(__mmask16)((1u << ({plane_out} - q0)) - 1);")
        else:
            w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
            for kh in range(g.k[0]):
                w(f"const int ih{kh} = oh*{g.s[0]} + {kh * g.d[0] - g.p[0]};")
                w(f"const int in{kh} = ih{kh} >= 0 && ih{kh} < {g.ih};")
            w("__m512i ow = iota;")
            w.open(f"for (int ow0 = 0; ow0 < {g.ow}; ow0 += 16)")
            w(f"const __mmask16 live = ow0 + 16 <= {g.ow} ? (__mmask16)0xFFFF : "
              f"(__mmask16)((1u << ({g.ow} - ow0)) - 1);")
        _col_masks(w, g, "ow")
        _byte_masks(w, g, kq)
        n = 32 if g.s[1] == 1 else 64
        mt = "__mmask32" if n == 32 else "__mmask64"
        for kh in range(g.k[0]):
            if flat and kh not in rows_in:
                continue
            if flat:
                lo, hi = max(0, g.p[0] - kh * g.d[0]), min(g.oh, g.ih + g.p[0] - kh * g.d[0])
                conds = [f"_mm512_cmpge_epi32_mask(qv, _mm512_set1_epi32({lo * g.ow}))"] * (lo > 0)
                conds += [f"_mm512_cmplt_epi32_mask(qv, _mm512_set1_epi32({hi * g.ow}))"] * (
                    hi < g.oh)
                w(f"const uint64_t re{kh} = _pdep_u64({' & '.join(['live', *conds])}, "
                  "0x1111111111111111ull) * 15u;")
            for j in range(kq):
                start = f"q0 + ({_off(g, kh, j)})" if flat else f"ow0*{g.s[1]} + {4 * j - g.p[1]}"
                limit = plane_in if flat else g.iw
                w(f"const {mt} lm{kh * kq + j} = ({mt})opfuse_x86_span({start}, {limit}, {n});")
        for i in range(cb):
            channel(w, i)
        if flat:
            w("qv = _mm512_add_epi32(qv, _mm512_set1_epi32(16));")
            w(f"ow = _mm512_add_epi32(ow, _mm512_set1_epi32({16 % g.ow}));")
            w(f"ow = _mm512_mask_sub_epi32(ow, _mm512_cmpge_epi32_mask(ow, "
              f"_mm512_set1_epi32({g.ow})), ow, _mm512_set1_epi32({g.ow}));")
        else:
            w("ow = _mm512_add_epi32(ow, _mm512_set1_epi32(16));")
            w.close()
        w.close()

    def emit(w: CWriter) -> None:
        if vbmi is not None:  # every lane's reads decided here (x86/depthwise_vbmi.py)
            w.lines.append(f"#if {hx.Z512} && defined(__AVX512VBMI__)")
            emit_dw_vbmi(w, g, kq, vbmi, tab, x, y, (wp, bp, pp, mp, sp), zx, zy, lo, hi,
                         short)
        w.lines.append(f"#{'elif' if vbmi is not None else 'if'} {hx.Z512}")
        w.open("")
        w("const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, "
          "2, 1, 0);")
        w(f"const __m512i padv = _mm512_set1_epi8((char){(zx + 128) & 0xFF});")
        w("const __m512i fl = _mm512_set1_epi8((char)0x80);")
        sw = g.s[1]
        w("#if defined(__AVX512VBMI__)")
        w(f"const __m512i spa = _mm512_loadu_si512((const void *)opfuse_x86_vbmi{sw});")
        w("#else")
        w(f"const __m512i spa = _mm512_loadu_si512((const void *)opfuse_x86_perm{sw});")
        w("#endif")
        w(f"const __m512i spb = _mm512_loadu_si512((const void *)opfuse_x86_shuf{sw});")
        w.open(f"for (int n = 0; n < {g.n}; ++n)")
        w("int c = 0;")
        cb = CB if g.c >= CB else 1
        w.open(f"for (; c + {cb} <= {g.c}; c += {cb})")
        block(w, cb)
        w.close()
        if g.c % cb:
            w.open(f"for (; c < {g.c}; ++c)")
            block(w, 1)
            w.close()
        w.close()
        w.close()
        hs, ws = staged(g, kq)
        if hs * ws <= AVX2_STAGE:
            w.lines.append(f"#elif {hx.AVX2}")

            def chain_store(w: CWriter) -> None:
                w(f"v = {chain.emit(w, 'v', ['n', 'c', f'p / {g.ow}', f'p % {g.ow}'])};")
                w(f"yc[p] = ({yct.name})v;")

            emit_avx2(w, g, kq, zx, x, y, yct, (wp, bp, mp, sp), zy, lo, hi,
                      chain_store if chain is not None else None, short)
        w.lines.append("#else")

    return emit


ACCS = 3  # independent accumulators (a tap row each, in turn): vpdpbusd's latency
CB = 4  # channels sharing a chunk's masks


def _off(g: ConvGeom, kh: int, j: int) -> int:
    """Flat: the input offset of quad j of tap row kh from the output pixel's index."""
    return (kh * g.d[0] - g.p[0]) * g.iw + 4 * j - g.p[1]


def _byte_masks(w: CWriter, g: ConvGeom, kq: int) -> None:
    """``bm<j>``: per byte of quad j (4 per lane), whether the lane's tap column is inside."""
    for j in range(kq):
        parts = [f"_pdep_u64(mc{4 * j + b}, 0x{(1 << b) * 0x1111111111111111:016x}ull)"
                 for b in range(4) if 4 * j + b < g.k[1]]
        w(f"const uint64_t bm{j} = {' | '.join(parts)};")


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


def fold_chain(pre: list[ir.Node], yv: ir.Value, node: ir.Node, params: Params, yct
               ) -> tuple[tuple[int, int], Chain8 | None]:  # noqa: ANN001
    """The output's clamp bounds and the epilogue chain: a chain of only Relu/Clip (TFLite's
    fused activation, input and output sharing parameters) is its clamps' intersection, folded
    into the vector clamp (the same integers while the ranges meet), with no chain left."""
    shape = dims(yv, node)
    lo, hi = yct.lo, yct.hi
    for p in pre:
        qi, qo = quant(p.inputs[0], p), quant(p.outputs[0], p)
        if p.op_type not in CLAMP_OPS or qi != qo or int_ctype(p.outputs[0], p) != yct:
            return (yct.lo, yct.hi), Chain8(pre, shape, params, yv.name)
        a, b = clamp_bounds(p, qo, yct, rounding(params))
        lo, hi = max(lo, a), min(hi, b)
    if lo > hi:
        return (yct.lo, yct.hi), Chain8(pre, shape, params, yv.name)
    return (lo, hi), None
