"""The AVX2 (and ymm VNNI) branch of the x86 int8 depthwise conv (x86/depthwise.py has the AVX-512
one): no mask registers, so each channel's plane is staged with its padding, as u8 (x ^ 0x80) with
u(z_x) around it (the same bias correction: a padded tap adds nothing), and 8 output pixels of a row
per ymm read every tap with plain loads. Per tap row and quad of taps (kw = 4j .. 4j+3): two 16-byte
loads (pixels 0-3 and 4-7), ``vpshufb`` spreads each pixel's 4 taps into its lane, one
``opfuse_x86_dot8`` (``vpdpbusd`` ymm, or the exact ``vpmaddwd`` pair) against the quad's weights;
then ``opfuse_x86_rq8`` and the row's first OW values stored: packed to bytes where no epilogue
chain follows and the output is int8 (8 a store, the row's last ``OW % 8`` by one ``memcpy``), else value by value
through the chain. The staged plane's padding is the same for every channel, so it is written
once per call and each channel writes only the inside."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.kernelplan.conv8 import ConvGeom

STAGE_LIMIT = 64 * 1024  # bytes of one channel's staged plane
PATTERN = {1: "0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6",
           2: "0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9"}


def staged(g: ConvGeom, kq: int) -> tuple[int, int]:
    """(rows, bytes per row) of a channel's staged plane: every row and column the output reads,
    and slack for the last vector's loads."""
    hs = (g.oh - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1
    ws = -(-g.ow // 8) * 8 * g.s[1] + 4 * kq + 16
    return hs, ws


def emit_avx2(w: CWriter, g: ConvGeom, kq: int, zx: int, x: str, y: str, yct, arrays: tuple,
              zy: int, lo: int, hi: int, chain_store: Callable[[CWriter], None] | None,  # noqa: ANN001
              short: bool = False) -> None:
    """The branch's body; ``arrays``: the C names of (quad weights, corrected bias, multipliers,
    shifts) as x86/depthwise.py stores them. ``chain_store(w)`` writes ``v`` (the int32 at
    pixel ``p`` of channel ``c``) through the epilogue chain into ``yc[p]``. ``short``: every
    sum below 2^30 and every shift a right shift, so ``opfuse_x86_rq8r`` requantizes."""
    wp, bp, mp, sp = arrays
    hs, ws = staged(g, kq)
    (sh, sw), (dh, _), (ph, pw) = g.s, g.d, g.p
    plane_in, plane_out = g.ih * g.iw, g.oh * g.ow
    rows, cols = min(g.ih, hs - ph), min(g.iw, ws - pw)
    packed = chain_store is None and yct.name == "int8_t"  # uint8: value by value
    rq = (f"opfuse_x86_rq8r(acc, mv, qe, {zy}, {lo}, {hi})" if short else
          f"opfuse_x86_rq8(acc, mv, sv, {zy}, {lo}, {hi})")
    w.open("")
    w(f"uint8_t xs[{hs * ws}] __attribute__((aligned(32)));")
    if not packed:
        w("int32_t tmp[8] __attribute__((aligned(32)));")
    w(f"const __m256i pat = _mm256_setr_epi8({PATTERN[sw]}, {PATTERN[sw]});")
    w(f"memset(xs, {(zx + 128) & 0xFF}, sizeof xs);  /* the padding: every channel's copy "
      "writes the same inside */")
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    w(f"const int8_t *xc = {x} + (n*{g.c} + c)*{plane_in};")
    w(f"{yct.name} *yc = {y} + (n*{g.c} + c)*{plane_out};")
    w(f"const uint8_t *wc = (const uint8_t *)({wp}) + c*{g.k[0] * kq * 4};")
    if rows > 0 and cols > 0:
        w.open(f"for (int h = 0; h < {rows}; ++h)")
        w(f"uint8_t *d = xs + (h + {ph})*{ws} + {pw};")
        w(f"const int8_t *r = xc + h*{g.iw};")
        w(f"for (int q = 0; q < {cols}; ++q) d[q] = (uint8_t)(r[q] ^ 0x80);")
        w.close()
    for t in range(g.k[0] * kq):
        w(f"const __m256i w{t} = _mm256_set1_epi32(opfuse_x86_ld32(wc + {4 * t}));")
    w(f"const __m256i bv = _mm256_set1_epi32({bp}[c]);")
    w(f"const __m256i mv = _mm256_set1_epi32({mp}[c]);")
    w(f"const int qe = -{sp}[c];" if short else f"const __m256i sv = _mm256_set1_epi32({sp}[c]);")
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
    w.open(f"for (int ow0 = 0; ow0 < {g.ow}; ow0 += 8)")
    w("__m256i acc0 = bv, acc1 = _mm256_setzero_si256();")
    for kh in range(g.k[0]):
        w(f"const uint8_t *r{kh} = xs + (oh*{sh} + {kh * dh})*{ws} + ow0*{sw};")
        for j in range(kq):
            t = kh * kq + j
            w(f"const __m256i v{t} = _mm256_shuffle_epi8(_mm256_inserti128_si256("
              f"_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(r{kh} + {4 * j}))), "
              f"_mm_loadu_si128((const __m128i *)(r{kh} + {4 * j + 4 * sw})), 1), pat);")
            w(f"acc{t % 2} = opfuse_x86_dot8(acc{t % 2}, v{t}, w{t});")
    w("const __m256i acc = _mm256_add_epi32(acc0, acc1);")
    if packed:
        _store_packed(w, g, rq)
    else:
        w(f"_mm256_store_si256((__m256i *)tmp, {rq});")
        w(f"const int m = {g.ow} - ow0 < 8 ? {g.ow} - ow0 : 8;")
        w.open("for (int l = 0; l < m; ++l)")
        w(f"const int p = oh*{g.ow} + ow0 + l;")
        w("int32_t v = tmp[l];")
        if chain_store is not None:
            chain_store(w)
        else:
            w(f"yc[p] = ({yct.name})v;")
        w.close()
    for _ in range(5):  # ow0, oh, c, n, the block
        w.close()


def _store_packed(w: CWriter, g: ConvGeom, rq: str) -> None:
    """The 8 sums requantized by ``rq`` (int8 values, each in [-128, 127] already, so the
    saturating packs keep them) packed to bytes and stored: 8 at once, a row's last ``OW % 8``
    by a ``memcpy`` of that constant size (never past the row)."""
    w(f"const __m256i r = {rq};")
    w("const __m128i r16 = _mm_packs_epi32(_mm256_castsi256_si128(r), "
      "_mm256_extracti128_si256(r, 1));")
    w("const __m128i r8 = _mm_packs_epi16(r16, r16);")
    w(f"void *yo = yc + oh*{g.ow} + ow0;")
    full, tail = g.ow // 8 * 8, g.ow % 8
    if not tail:
        w("_mm_storel_epi64((__m128i *)yo, r8);")
    elif not full:
        w(f"memcpy(yo, &r8, {tail});")
    else:
        w(f"if (ow0 < {full}) _mm_storel_epi64((__m128i *)yo, r8); else memcpy(yo, &r8, {tail});")
