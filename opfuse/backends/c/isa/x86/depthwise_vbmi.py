"""The int8 depthwise conv with AVX-512 VBMI: x86/depthwise.py's vectors of 16 output pixels of
one channel, with every per-lane decision taken at generation time.

Each read of a tap row's quad of taps (kw = 4j .. 4j+3) for a vector's 16 pixels is one masked
load of at most 64 input bytes at a constant offset (``Window``), as u8 (x ^ 0x80), and one
``vpermt2b`` by a constant table: byte 4l + k of the result is the byte lane l's tap k reads, or
(index 64: the second source) u8(z_x) where that tap lies outside the input or past the row's
last tap. x86/depthwise.py computed the same masks at run time per block of channels. One table
serves every channel, so the channel loop runs inside each vector; the requantization shares the
channel's multiplier and shift (``opfuse_x86_rq16s``). The bias correction is x86/depthwise.py's
(a padded tap adds nothing), so the int32 sums are the same.

Two layouts of the vectors:

* flat: the output plane as one run of pixels (a vector may span output rows): a window per
  vector, tap row and quad; for planes of up to ``FLAT_MAX`` vectors (opfuse/kernelplan/dw8.py,
  the plan this module writes and the cost model counts) whose windows fit 64 bytes,
  where it fills more lanes than rows do;
* rows: per output row (a loop), vectors of 16 columns: a window per vector and quad, read at
  each tap row inside the input; a tap row outside adds its pad share (x86/depthwise.py's
  ``pc``).
"""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.kernelplan.dw8 import DwPlan


def emit_dw_vbmi(w: CWriter, g: ConvGeom, kq: int, plan: DwPlan, tab: str, x: str, y: str,
                 arrays: tuple[str, str, str, str, str], zx: int, zy: int, lo: int,
                 hi: int, short: bool = False) -> None:
    """The branch's body; ``arrays``: the quads of weights, bias, row pad shares, multipliers
    and shifts of x86/depthwise.py; ``short``: every sum is below 2^30 and every shift a right
    shift (``opfuse_x86_rq16r``). Per channel: its constants once (the quads' weights
    broadcast, the multiplier, the shifts), then every vector of the plane (flat) or of each
    row, the tables read from memory by ``vpermt2b``."""
    wp, bp, pp, mp, sp = arrays
    plane_in, plane_out = g.ih * g.iw, g.oh * g.ow
    w.open("")
    w(f"const __m512i padv = _mm512_set1_epi8((char){(zx + 128) & 0xFF});")
    w("const __m512i fl = _mm512_set1_epi8((char)0x80);")
    w(f"const uint8_t *tb = (const uint8_t *)({tab});")
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    w(f"const int8_t *xc = {x} + (n*{g.c} + c)*{plane_in};")
    w(f"__typeof__({y}) yc = {y} + (n*{g.c} + c)*{plane_out};")
    w(f"const uint8_t *wc = (const uint8_t *)({wp}) + c*{g.k[0] * kq * 4};")
    for t in range(g.k[0] * kq):
        w(f"const __m512i w{t} = _mm512_set1_epi32(opfuse_x86_ld32(wc + {4 * t})); (void)w{t};")
    w(f"const __m512i bias = _mm512_set1_epi32({bp}[c]), mul = _mm512_set1_epi32({mp}[c]);")
    w(f"const int sc = {sp}[c], ls = sc > 0 ? sc : 0, rs = sc < 0 ? -sc : 0;")
    w(f"const int32_t *pc = {pp} + c*{g.k[0]};")
    w("(void)pc; (void)xc; (void)ls;")
    if plan.flat:
        for v in range(plan.vectors):
            _vector(w, g, kq, plan, v, plane_out, zy, lo, hi, short)
    else:
        w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
        for kh in range(g.k[0]):
            w(f"const int ih{kh} = oh*{g.s[0]} + {kh * g.d[0] - g.p[0]};")
            w(f"const int in{kh} = ih{kh} >= 0 && ih{kh} < {g.ih};")
        for v in range(plan.vectors):
            _vector(w, g, kq, plan, v, plane_out, zy, lo, hi, short)
        w.close()
    w.close()
    w.close()
    w.close()


def _vector(w: CWriter, g: ConvGeom, kq: int, plan: DwPlan, v: int, plane_out: int, zy: int,
            lo: int, hi: int, short: bool) -> None:
    """Vector ``v`` of the plane (flat) or of row ``oh``, channel ``c``."""
    w.open("")
    first = 16 * v
    count = min(16, (plane_out if plan.flat else g.ow) - first)
    w("__m512i acc0 = bias, acc1 = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512();")
    for kh in range(g.k[0]):
        acc = f"acc{kh % 3}"
        pad = f"{acc} = _mm512_add_epi32({acc}, _mm512_set1_epi32(pc[{kh}]));"
        wins = [plan.windows[(v, kh, j) if plan.flat else (v, j)] for j in range(kq)]
        if all(win is None for win in wins):  # a tap row wholly outside: its pad share
            w(pad)
            continue
        if not plan.flat:
            w.open(f"if (in{kh})")
        for j, win in enumerate(wins):
            weight = f"w{kh * kq + j}"
            if win is None:  # every byte pad: u8(z_x) against the quad's weights
                w(f"{acc} = opfuse_x86_dot16({acc}, padv, {weight});")
                continue
            at = f"xc + {win.base}" if plan.flat else f"xc + ih{kh}*{g.iw} + {win.base}"
            mask = "~(__mmask64)0" if win.count >= 64 else f"(__mmask64){(1 << win.count) - 1}ull"
            w(f"{acc} = opfuse_x86_dot16({acc}, _mm512_permutex2var_epi8(_mm512_xor_si512("
              f"_mm512_maskz_loadu_epi8({mask}, {at}), fl), _mm512_loadu_si512((const void *)"
              f"(tb + {64 * win.table})), padv), {weight});")
        if not plan.flat:
            w.close(f" else {pad}")
    acc = "_mm512_add_epi32(acc0, _mm512_add_epi32(acc1, acc2))"
    w(f"const __m512i r = opfuse_x86_rq16r({acc}, mul, rs, {zy}, {lo}, {hi});" if short else
      f"const __m512i r = opfuse_x86_rq16s({acc}, mul, ls, rs, {zy}, {lo}, {hi});")
    pix = f"{first}" if plan.flat else f"oh*{g.ow} + {first}"
    w(f"_mm_mask_storeu_epi8(yc + {pix}, (__mmask16){(1 << count) - 1}, "
      "_mm512_cvtepi32_epi8(r));")
    w.close()
