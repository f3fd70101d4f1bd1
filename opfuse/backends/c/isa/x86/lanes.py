"""The int8 Conv core with output pixels in the zmm lanes (AVX-512 VNNI), x86/core.py's other
register block: 16 output pixels of one output channel per vector instead of 16 channels of one
pixel.

Its input is core.py's staged ``xs`` (``[ICp/4][IHp][IWp][4]`` unsigned bytes), so with a
column stride of 1 the 16 pixels of a vector at tap (kh, kw) and quad ``c4`` are 64 contiguous
bytes: one unaligned load. The weights are core.py's packing (``[group][tap][ICp/4][OCp][4]``),
so a channel's 4 weights of a quad are one dword, broadcast (the signed operand): per step ``V``
loads, ``C`` broadcasts and ``V x C`` ``vpdpbusd`` for ``V`` pixel vectors x ``C`` channels,
where the channel-major block needs a broadcast per pixel. With a column stride of 2 the
staged rows are first split into even and odd columns (``xp``), so a vector's pixels are again
64 contiguous bytes. The
epilogue runs per channel on a vector of pixels, which is the NCHW output's order: the
requantization with the channel's multiplier and shift broadcast, the residual Add's other
operand loaded as it lies (x86/residual.py), one masked 16-byte store; no transposes.

A block is ``V`` vectors along an output row (a short row takes several rows a block), chosen
when the row's vectors are at least ``MIN_FILL`` full. The int32 sums are the channel-major
core's, in another order of the same wrapping additions: bit-exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.core import Arrays, Core, emit_dots

ACC = 16  # accumulators of a block, at most (24 spilled: gcc kept them on the stack)
V_MAX = 4  # pixel vectors of a block
MIN_FILL = 0.8  # lanes of a row's vectors that are pixels of the row, at least (a 6x6 plane's
# 36 of 48 ran 0.92x the channel-major core's speed)
S2_CHANNELS = 64  # stride 2 with whole vectors of channels: the pixel lanes from this many
SLACK = 64  # bytes after xs that a row's last, partial vector may read (its lanes are dropped)


@dataclass(frozen=True)
class LanesPlan:
    per_row: int  # vectors of one output row
    rows: int  # output rows of a block (rows x per_row vectors when per_row < V_MAX)
    chans: int  # output channels of a block
    stack: int = 1  # output rows of a vector (rows of 4 or 8 pixels: 4 or 2 a vector)


def plan_lanes(core: Core) -> LanesPlan | None:
    """The block of ``core``, or None where the channel-major core stays: a quad core, a
    column stride over 2, rows too short to fill the vectors; stride 2 only where the
    channel-major core's vectors of 16 channels are not full (vww_96_int8's 3 -> 8 stem ran
    1.61x faster) or with ``S2_CHANNELS`` of them or more: the de-interleave of the staged rows
    is paid once for all the channels (pretrainedResnet_quant's 32 -> 64 3x3 stride-2 conv ran
    1.45x faster, its 16 -> 32 one 0.97-0.99x, so that one stays)."""
    if core.quad or core.sw not in (1, 2):
        return None
    if core.sw == 2 and core.ocg % 16 == 0 and core.ocg < S2_CHANNELS:
        return None
    stack = 16 // core.cols if core.cols in (4, 8) else 1
    if stack > 1 and core.rows % stack == 0:  # a vector of whole rows: one 16-pixel run
        vecs = min(V_MAX, core.rows // stack)
        chans = next(c for c in (16, 12, 8, 6, 4, 3, 2, 1) if c * vecs <= ACC)
        return LanesPlan(1, vecs * stack, min(chans, core.ocg), stack)
    per_row = -(-core.cols // 16)
    if core.cols / (16 * per_row) < MIN_FILL:
        return None
    rows = max(1, min(V_MAX // per_row, core.rows)) if per_row < V_MAX else 1
    vecs = min(per_row, V_MAX) * rows
    chans = next(c for c in (16, 12, 8, 6, 4, 3, 2, 1) if c * vecs <= ACC)
    return LanesPlan(per_row, rows, min(chans, core.ocg))


def emit_lanes(w: CWriter, core: Core, a: Arrays, lp: LanesPlan,
               stage: Callable[[CWriter, Arrays], None], out: Callable[[str, str], str], zy: int, lo: int,
               hi: int, batch: int, epilogue: Callable[[CWriter, str, str, str, str], str] | None
               ) -> None:
    """The zmm branch's body over ``n`` < ``batch`` and ``grp``: ``out(oc, pix)`` is the C
    pointer of output channel ``oc`` (of the whole conv) at pixel ``pix`` of its plane;
    ``epilogue(w, v, oc, pix, k)``, if given, returns the 16 output bytes (a C ``__m128i``)
    from the requantized int32 vector ``v`` (a residual Add), ``k`` the lanes that are
    pixels."""
    w.open("")
    w(f"uint8_t xs[{core.stage_bytes + 2 * SLACK}] __attribute__((aligned(64)));")
    if core.sw == 2:
        w(f"uint8_t xp[{core.stage_bytes + 2 * SLACK}] __attribute__((aligned(64)));")
    w.open(f"for (int n = 0; n < {batch}; ++n)")
    w.open(f"for (int grp = 0; grp < {core.group}; ++grp)")
    stage(w, a)
    if core.sw == 2:
        _phases(w, core)
    full_rows = core.rows - core.rows % lp.rows
    if full_rows:
        w.open(f"for (int oh = 0; oh < {full_rows}; oh += {lp.rows})")
        _row_chunks(w, core, a, lp, lp.rows, out, zy, lo, hi, epilogue)
        w.close()
    if core.rows % lp.rows and lp.stack > 1:  # the last rows: fewer vectors
        w.open("")
        w(f"const int oh = {full_rows};")
        _row_chunks(w, core, a, lp, core.rows % lp.rows, out, zy, lo, hi, epilogue)
        w.close()
    elif core.rows % lp.rows:
        w.open(f"for (int oh = {full_rows}; oh < {core.rows}; ++oh)")
        _row_chunks(w, core, a, lp, 1, out, zy, lo, hi, epilogue)
        w.close()
    w.close()
    w.close()
    w.close()


def _row_chunks(w: CWriter, core: Core, a: Arrays, lp: LanesPlan, rows: int, out, zy: int,  # noqa: ANN001
                lo: int, hi: int, epilogue) -> None:  # noqa: ANN001
    """Output rows ``oh .. oh+rows-1``: chunks of at most ``V_MAX`` vectors along them, each
    over every block of channels (stacked: a vector every ``stack`` rows)."""
    if lp.stack > 1:
        w("const int ow0 = 0;")
        vecs = [(lp.stack * i, 0) for i in range(rows // lp.stack)]
        _channel_blocks(w, core, a, vecs, max(1, min(lp.chans, ACC // len(vecs))), False, out,
                        zy, lo, hi, epilogue, lp.stack)
        return
    chunk = min(lp.per_row, V_MAX)
    full, rest = divmod(lp.per_row, chunk)
    for count, start, nv in ((full, 0, chunk), (1 if rest else 0, full * chunk * 16, rest)):
        if not count:
            continue
        w.open(f"for (int t = 0; t < {count}; ++t)")
        w(f"const int ow0 = {start} + t*{nv * 16};")
        vecs = [(r, 16 * j) for r in range(rows) for j in range(nv)]
        last = start + (count - 1) * nv * 16 + (nv - 1) * 16  # the chunk's last vector's column
        ragged = last + 16 > core.cols
        chans = max(1, min(lp.chans, ACC // len(vecs)))
        _channel_blocks(w, core, a, vecs, chans, ragged, out, zy, lo, hi, epilogue)
        w.close()


def _channel_blocks(w: CWriter, core: Core, a: Arrays, vecs, chans: int, ragged: bool,  # noqa: ANN001
                    out, zy: int, lo: int, hi: int, epilogue, stack: int = 1) -> None:  # noqa: ANN001
    full = core.ocg - core.ocg % chans
    if full:
        w.open(f"for (int o0 = 0; o0 < {full}; o0 += {chans})")
        _block(w, core, a, vecs, chans, ragged, out, zy, lo, hi, epilogue, stack)
        w.close()
    if core.ocg % chans:
        w.open("")
        w(f"const int o0 = {full};")
        _block(w, core, a, vecs, core.ocg % chans, ragged, out, zy, lo, hi, epilogue, stack)
        w.close()


def _block(w: CWriter, core: Core, a: Arrays, vecs, chans: int, ragged: bool, out,  # noqa: ANN001
           zy: int, lo: int, hi: int, epilogue, stack: int = 1) -> None:  # noqa: ANN001
    """Channels ``o0 .. o0+chans-1`` of group ``grp`` at the vectors ``vecs`` ((row offset,
    column offset) from (``oh``, ``ow0``))."""
    cstride, rowb = core.ihp * core.iwp * 4, core.rowb
    half = -(-core.iwp // 2) * 4  # stride 2: the odd columns' offset in a staged row
    w.open("")
    w(f"const int cb = grp*{core.ocp} + o0;")
    for c in range(chans):
        w(f"const __m512i b{c} = _mm512_set1_epi32({a.b}[cb + {c}]);")
        w(" ".join(f"__m512i a{i}_{c} = b{c};" for i in range(len(vecs))))
    w(f"const uint8_t *xb = {'xs' if core.sw == 1 else 'xp'} + oh*{core.sh * rowb} + ow0*4;")
    w(f"const int8_t *wb = {a.w} + grp*{core.kh * core.kwl * core.icp * core.ocp} + o0*4;")
    taps = core.kh * core.kw > 1
    if taps:
        w.open(f"for (int kh = 0; kh < {core.kh}; ++kh)")
        w.open(f"for (int kw = 0; kw < {core.kw}; ++kw)")
        col = f"kw*{core.dw * 4}" if core.sw == 1 else \
            f"(kw*{core.dw}) % 2*{half} + (kw*{core.dw}) / 2*4"
        w(f"const uint8_t *xt = xb + kh*{core.dh * rowb} + {col};")
        w(f"const int8_t *wt = wb + (kh*{core.kw} + kw)*{core.icp * core.ocp};")
    else:
        w("const uint8_t *xt = xb;")
        w("const int8_t *wt = wb;")
    w.open(f"for (int c4 = 0; c4 < {core.icp // 4}; ++c4)")
    emit_dots(w, "__m512i", "opfuse_x86_dot16",
              [_gather_rows([f"xt + c4*{cstride} + {(r + k) * core.sh * rowb + col * 4}"
                             for k in range(stack)]) for r, col in vecs],
              [f"_mm512_set1_epi32(opfuse_x86_ld32((const uint8_t *)wt + c4*{core.ocp * 4} + "
               f"{c * 4}))" for c in range(chans)], spread="w")
    w.close()
    if taps:
        w.close()
        w.close()
    for c in range(chans):
        w.open("")
        w(f"const __m512i m_ = _mm512_set1_epi32({a.m}[cb + {c}]), "
          f"s_ = _mm512_set1_epi32({a.s}[cb + {c}]); (void)s_;")
        w(f"const int oc = grp*{core.ocg} + o0 + {c};")
        once = a.short and epilogue is None and lo >= zy  # one_rounding()
        if once:
            w(f"const int e_ = -{a.s}[cb + {c}];")
            w("const __m512i r_ = _mm512_set1_epi64((1LL << 30) + (1LL << (30 + e_)));")
            w("const __m128i n_ = _mm_cvtsi32_si128(31 + e_), n1_ = _mm_cvtsi32_si128(e_ - 1);")
        for i, (r, col) in enumerate(vecs):
            pix = f"(oh + {r})*{core.cols} + ow0 + {col}" if core.rows > 1 else f"ow0 + {col}"
            k = f"k{i}"
            w.open("")
            if ragged and col == vecs[-1][1]:
                w(f"const int left = {core.cols} - (ow0 + {col});")
                w(f"const __mmask16 {k} = left >= 16 ? (__mmask16)0xFFFF : "
                  f"(__mmask16)((1u << left) - 1);")
            else:
                w(f"const __mmask16 {k} = (__mmask16)0xFFFF;")
            if once:
                one_rounding(w, f"a{i}_{c}", zy, lo, hi)
            else:
                w(f"__m512i v = opfuse_x86_rq16r(a{i}_{c}, m_, -{a.s}[cb + {c}], {zy}, {lo}, "
                  f"{hi});" if a.short else
                  f"__m512i v = opfuse_x86_rq16(a{i}_{c}, m_, s_, {zy}, {lo}, {hi});")
            b = "_mm512_cvtepi32_epi8(v)" if epilogue is None else epilogue(w, "v", "oc", pix, k)
            w(f"_mm_mask_storeu_epi8({out('oc', pix)}, {k}, {b});")
            w.close()
        w.close()
    w.close()


def one_rounding(w: CWriter, acc: str, zy: int, lo: int, hi: int) -> None:
    """``v`` = TFLite's requantization of ``acc`` (|acc| < 2^30, a right shift ``e_`` >= 1:
    ``a.short``) + z_y, clamped to [lo, hi] with ``lo >= z_y`` (a Relu), as one rounding:
    ``floor((acc*m + 2^30 + 2^(30+e)) / 2^(31+e))``. Where the doubling high product h =
    ``floor((acc*m + 2^30) / 2^31)`` is >= 0 that is TFLite's ``floor((h + 2^(e-1)) / 2^e)``
    (a floor inside a floor divides at once); where h < 0 both are <= 0, + z_y <= lo: the
    clamp gives lo either way. So the same integers for every sum, in 8 operations where
    ``opfuse_x86_rq16r`` takes 12 (odd lanes: the high dword of ``P >> (e - 1)``)."""
    w(f"__m512i v = _mm512_mask_blend_epi32((__mmask16)0xAAAA, _mm512_sra_epi64(_mm512_add_epi64("
      f"_mm512_mul_epi32({acc}, m_), r_), n_), _mm512_sra_epi64(_mm512_add_epi64(_mm512_mul_epi32("
      f"_mm512_srli_epi64({acc}, 32), m_), r_), n1_));")
    w(f"v = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, _mm512_set1_epi32({zy})), "
      f"_mm512_set1_epi32({lo})), _mm512_set1_epi32({hi}));")


def _gather_rows(at: list[str]) -> str:
    """A zmm from 1 run of 64 bytes, 2 of 32 or 4 of 16 at the C pointers ``at``."""
    if len(at) == 1:
        return f"_mm512_loadu_si512((const void *)({at[0]}))"
    if len(at) == 2:
        return (f"_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)"
                f"({at[0]}))), _mm256_loadu_si256((const __m256i *)({at[1]})), 1)")
    v = f"_mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)({at[0]})))"
    for k in range(1, 4):
        v = f"_mm512_inserti32x4({v}, _mm_loadu_si128((const __m128i *)({at[k]})), {k})"
    return v


def _phases(w: CWriter, core: Core) -> None:
    """Stride 2: ``xp``, each staged row of ``xs`` with its even columns first, then its odd
    ones, so a vector's 16 pixels read 16 consecutive columns of one phase. 32 columns at a
    time by two ``vpermt2d``; a row's stores past its even half (or its end) are overwritten by
    its odd half (or the next row), the last row's land in the slack."""
    half = -(-core.iwp // 2) * 4
    w.open("")
    w("const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, "
      "2, 0);")
    w("const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));")
    w.open(f"for (int r = 0; r < {core.icp // 4 * core.ihp}; ++r)")
    w(f"const uint8_t *s = xs + r*{core.rowb};")
    w(f"uint8_t *d = xp + r*{core.rowb};")
    for idx, at in (("ev", "0"), ("od", str(half))):
        w.open(f"for (int j = 0; j < {core.iwp}; j += 32)")
        w("const __m512i a = _mm512_loadu_si512((const void *)(s + j*4)), "
          "b = _mm512_loadu_si512((const void *)(s + j*4 + 64));")
        w(f"_mm512_storeu_si512((void *)(d + {at} + j*2), _mm512_permutex2var_epi32(a, {idx}, b));")
        w.close()
    w.close()
    w.close()
