"""The staging of x86/core.py's input ``xs``: ``[ICp/4][IHp][IWp][4]`` unsigned bytes (each
pixel's 4 channels of a quad together, u = x + 128 for int8) from an NCHW tensor, from a TFLite
graph input's NHWC tensor read in place (``emit_stage_nhwc``, fusion/views.py), or from a
row-major Gemm operand. A 1x1 conv with a stride stages only the pixels it reads (``step``), so
it runs as a pointwise conv over its output plane."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.core import Arrays, Core


def emit_stage_nchw(w: CWriter, core: Core, a: Arrays, xg: str, xct: str, ih: int, iw: int,
                    ph: int, pw: int) -> None:
    """``xs`` from the NCHW input of group ``grp`` at ``xg`` (its ``ih`` x ``iw`` planes): 4
    channel rows at a time, 16 columns interleaved by SSE2 unpacks into 64 bytes."""
    rows, cols = min(ih, core.ihp - ph), min(iw, core.iwp - pw)
    if ph or pw or rows < core.ihp or cols < core.iwp or core.icp != core.icg:
        w(f"memset(xs, {a.pad}, sizeof xs);")
    plane, cstride = ih * iw, core.ihp * core.iwp * 4
    flip = " ^ 0x80" if a.flip else ""
    if core.quad:  # one channel, its rows as they are
        w.open(f"for (int h = 0; h < {rows}; ++h)")
        w(f"uint8_t *d = xs + (h + {ph})*{core.rowb} + {pw};")
        w(f"const {xct} *r = {xg} + h*{iw};")
        w(f"for (int q = 0; q < {cols}; ++q) d[q] = (uint8_t)(r[q]{flip});")
        w.close()
        return
    if core.icg >= 4:
        w.open(f"for (int c4 = 0; c4 < {core.icg // 4}; ++c4)")
        _stage_quad(w, a, f"{xg} + c4*{4 * plane}", "c4", 4, xct, rows, cols, iw, plane, cstride,
                    ph, pw, core.iwp)
        w.close()
    if core.icg % 4:  # the last channels; the quad's others keep the pad byte of the memset
        c0 = core.icg - core.icg % 4
        _stage_quad(w, a, f"{xg} + {c0 * plane}", str(c0 // 4), core.icg % 4, xct, rows, cols,
                    iw, plane, cstride, ph, pw, core.iwp)


def emit_stage_sampled(w: CWriter, core: Core, a: Arrays, xg: str, xct: str, ih: int, iw: int,
                       oh: int, ow: int, step: tuple[int, int]) -> None:
    """``xs`` of a pointwise core over an ``oh`` x ``ow`` output plane from the NCHW input at
    ``xg`` (its ``ih`` x ``iw`` planes) read every ``step`` rows and columns: a 1x1 conv with a
    stride and no padding."""
    if core.icp != core.icg:
        w(f"memset(xs, {a.pad}, sizeof xs);")
    plane, cstride = ih * iw, core.ihp * core.iwp * 4
    sh, sw = step
    if core.icg >= 4:
        w.open(f"for (int c4 = 0; c4 < {core.icg // 4}; ++c4)")
        _stage_quad(w, a, f"{xg} + c4*{4 * plane}", "c4", 4, xct, oh, ow, iw * sh, plane,
                    cstride, 0, 0, ow, sw, iw)
        w.close()
    if core.icg % 4:
        c0 = core.icg - core.icg % 4
        _stage_quad(w, a, f"{xg} + {c0 * plane}", str(c0 // 4), core.icg % 4, xct, oh, ow,
                    iw * sh, plane, cstride, 0, 0, ow, sw, iw)


def _stage_quad(w: CWriter, a: Arrays, x0: str, c4: str, real: int, xct: str, rows: int,
                cols: int, iw: int, plane: int, cstride: int, ph: int, pw: int, iwp: int,
                sw: int = 1, width: int = 0) -> None:
    """One quad of staged channels from ``real`` <= 4 NCHW channel planes at ``x0`` (``iw``
    elements from a staged row's source to the next's; ``sw``: the column step, 1 or more, in
    rows of ``width``): 16 columns at a time interleaved by SSE2 unpacks (a missing channel is
    the pad byte; a step of 2 keeps the even bytes of 32), the rest byte by byte."""
    flip = " ^ 0x80" if a.flip else ""
    w.open("")
    w(f"const {xct} *x0 = {x0};")
    w.open(f"for (int h = 0; h < {rows}; ++h)")
    w(f"uint8_t *d = xs + {c4}*{cstride} + ((h + {ph})*{iwp} + {pw})*4;")
    w(f"const {xct} *r = x0 + h*{iw};")
    w("int q = 0;")
    vec = cols if sw == 1 else min(cols, width // 2) if sw == 2 else 0  # 16-column runs
    if vec >= 16:
        w.open(f"for (; q + 16 <= {vec}; q += 16)")
        if a.flip:
            w("const __m128i f = _mm_set1_epi8((char)0x80);")
        if sw == 2:
            w("const __m128i ev = _mm_set1_epi16(0x00FF);")
        for j in range(4):
            if j >= real:
                w(f"const __m128i c{j} = _mm_set1_epi8((char){a.pad});")
                continue
            ld = f"_mm_loadu_si128((const __m128i *)(r + {j * plane} + q))"
            if sw == 2:
                lo, hi = (f"_mm_and_si128(_mm_loadu_si128((const __m128i *)(r + {j * plane} + "
                          f"2*q + {o})), ev)" for o in (0, 16))
                ld = f"_mm_packus_epi16({lo}, {hi})"
            w(f"const __m128i c{j} = {f'_mm_xor_si128({ld}, f)' if a.flip else ld};")
        w("const __m128i l01 = _mm_unpacklo_epi8(c0, c1), h01 = _mm_unpackhi_epi8(c0, c1);")
        w("const __m128i l23 = _mm_unpacklo_epi8(c2, c3), h23 = _mm_unpackhi_epi8(c2, c3);")
        for j, (fn, lo_hi) in enumerate((("lo", "l"), ("hi", "l"), ("lo", "h"), ("hi", "h"))):
            w(f"_mm_storeu_si128((__m128i *)(d + q*4 + {16 * j}), "
              f"_mm_unpack{fn}_epi16({lo_hi}01, {lo_hi}23));")
        w.close()
    if sw == 1 and cols % 16 >= 8:  # 8 more columns: 8-byte loads, two stores
        w.open("")
        for j in range(4):
            ld = (f"_mm_loadl_epi64((const __m128i *)(r + {j * plane} + q))" if j < real else
                  f"_mm_set1_epi8((char){a.pad})")
            w(f"const __m128i c{j} = {f'_mm_xor_si128({ld}, _mm_set1_epi8((char)0x80))' if a.flip and j < real else ld};")
        w("const __m128i l01 = _mm_unpacklo_epi8(c0, c1), l23 = _mm_unpacklo_epi8(c2, c3);")
        w("_mm_storeu_si128((__m128i *)(d + q*4), _mm_unpacklo_epi16(l01, l23));")
        w("_mm_storeu_si128((__m128i *)(d + q*4 + 16), _mm_unpackhi_epi16(l01, l23));")
        w("q += 8;")
        w.close()
    w.open(f"for (; q < {cols}; ++q)")
    for j in range(real):
        w(f"d[q*4 + {j}] = (uint8_t)(r[{j * plane} + q*{sw}]{flip});")
    w.close()
    w.close()
    w.close()


def emit_stage_nhwc(w: CWriter, core: Core, a: Arrays, xg: str, xct: str, channels: int,
                    pitch: int, step: int, rows: int, cols: int, ph: int, pw: int,
                    iwp: int) -> None:
    """``xs`` from the NHWC input of group ``grp`` at ``xg`` (pixels ``channels`` elements apart):
    staged row ``h`` from the input at ``h*pitch``, its column ``q`` from the pixel at
    ``q*step``, each pixel's channels gathered into its quads (``iwp``: staged columns per staged
    row, the core's own but for a strided pointwise core, whose rows are the output's)."""
    if ph or pw or rows * cols < core.ihp * core.iwp or core.icp != core.icg:
        w(f"memset(xs, {a.pad}, sizeof xs);")
    flip = " ^ 0x80" if a.flip else ""
    cstride = core.ihp * core.iwp * 4
    w.open(f"for (int h = 0; h < {rows}; ++h)")
    w(f"const {xct} *r = {xg} + h*{pitch};")
    if core.quad:  # one channel: its row's bytes as they are
        w(f"uint8_t *d = xs + (h + {ph})*{core.rowb} + {pw};")
        w(f"for (int q = 0; q < {cols}; ++q) d[q] = (uint8_t)(r[q*{step}]{flip});")
        w.close()
        return
    w(f"uint8_t *d = xs + ((h + {ph})*{iwp} + {pw})*4;")
    w("int q = 0;")
    if core.icg == channels and channels in (2, 3, 4):
        _gather_quads(w, a, channels, cols, step)
    w.open(f"for (; q < {cols}; ++q)")
    w(f"const {xct} *p = r + q*{step};")
    if core.icg <= 16:  # the first conv's few channels, one store each
        for c in range(core.icg):
            w(f"d[{(c // 4) * cstride} + q*4 + {c % 4}] = (uint8_t)(p[{c}]{flip});")
    else:
        w(f"for (int c = 0; c < {core.icg}; ++c) d[(c/4)*{cstride} + q*4 + c%4] = "
          f"(uint8_t)(p[c]{flip});")
    w.close()
    w.close()


def _gather_quads(w: CWriter, a: Arrays, channels: int, cols: int, step: int) -> None:
    """4 pixels of ``channels`` < 4 bytes (their whole quad) per SSSE3 shuffle (every branch
    staging is written in has it: AVX2 and up), the pad byte filling each quad: loads of 16 bytes
    that stay inside the row (the rest byte by byte)."""
    need = max(4, -(-16 // step))  # columns whose bytes a 16-byte load at column q covers
    if cols < need or step != channels:
        return
    idx = [p * channels + c if c < channels else -128
           for p in range(4) for c in range(4)]
    flip = [(0x80 if a.flip else 0) if c < channels else 0 for _ in range(4) for c in range(4)]
    pad = [0 if c < channels else a.pad for _ in range(4) for c in range(4)]

    def vec(v: list[int]) -> str:
        return "_mm_setr_epi8(" + ", ".join(f"(char){x}" for x in v) + ")"

    w.open("")
    w(f"const __m128i ix = {vec(idx)};")
    w(f"const __m128i fx = {vec(flip)}, px = {vec(pad)};")
    w.open(f"for (; q + {need} <= {cols}; q += 4)")
    w(f"const __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(r + q*{step})), ix);")
    w("_mm_storeu_si128((__m128i *)(d + q*4), _mm_or_si128(_mm_xor_si128(v, fx), px));")
    w.close()
    w.close()


def emit_stage_rows(w: CWriter, core: Core, a: Arrays, src: str, xct: str) -> None:
    """``xs`` from row-major ``[cols][ICg]`` input at ``src`` (a Gemm's A)."""
    if core.icp != core.icg:
        w("memset(xs, 0, sizeof xs);")
    flip = " ^ 0x80" if a.flip else ""
    w.open(f"for (int q = 0; q < {core.cols}; ++q)")
    w(f"const {xct} *s = {src} + q*{core.icg};")
    w(f"for (int c = 0; c < {core.icg}; ++c) xs[(c/4)*{core.cols * 4} + q*4 + c%4] = "
      f"(uint8_t)(s[c]{flip});")
    w.close()
