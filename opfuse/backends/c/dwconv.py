"""Depthwise convolution (one input and one output channel per group), epilogue fused.

Per channel, the KH*KW weights and the bias are loaded into scalars once. The output rows are
processed in bands: the input rows a band reads are copied into a small zero-bordered buffer on
the stack, so every tap reads inside it and the arithmetic has no tests. At stride 1 the band is
computed as one flat loop over the padded width (columns past the output width are computed and
dropped), otherwise row by row, with the band's rows split into their column phases at a
horizontal stride > 1 (so a stride-2 tap is a contiguous load, not a strided gather); both are sums of KH*KW products at compile-time offsets that gcc
vectorizes. The band's values (+ bias) then go through the epilogue chain in one flat vectorized
loop (no data-dependent branches) and are stored once.
"""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.epilogue import Chain, emit_apply

BAND_FLOATS = 4096  # stack budget of the padded input band (floats)


def emit_depthwise(w: CWriter, g, x: str, wt: str, b: str | None, chain: Chain, y: str) -> None:
    kh_n, kw_n = g.k
    (sh, sw), (dh, dw), pw = g.s, g.d, g.p[1]
    wp = max(g.iw + pw, (g.ow - 1) * sw + (kw_n - 1) * dw + 1)  # padded row width
    if sw == 1:
        wp = max(wp, g.ow + (kw_n - 1) * dw)
    else:  # column phases: padded column q of a band row at (q % sw)*hw + q / sw
        wp = sw * -(-wp // sw)
    rows_for = lambda rb: (rb - 1) * sh + (kh_n - 1) * dh + 1  # noqa: E731
    rb = g.oh
    while rb > 1 and rows_for(rb) * wp > BAND_FLOATS:
        rb -= 1
    flat = chain.view([[0], [1], [2, 3]])
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    w(f"const float *xc = {x} + (n*{g.c} + c)*{g.ih * g.iw};")
    w(f"const float *wc = {wt} + c*{kh_n * kw_n};")
    for t in range(kh_n * kw_n):
        w(f"const float w{t} = wc[{t}];")
    w(f"const float bv = {b}[c];" if b is not None else "const float bv = 0.0f;")
    full, rest = divmod(g.oh, rb)
    for rows, count, start in ((rb, full, 0), (rest, 1 if rest else 0, full * rb)):
        if count == 0:
            continue
        w.open(f"for (int t = 0; t < {count}; ++t)")
        w(f"const int oh0 = {start} + t*{rows};")
        _band(w, g, rows, wp, flat, chain, y)
        w.close()
    w.close()
    w.close()


def _band(w: CWriter, g, rows: int, wp: int, flat, chain: Chain, y: str) -> None:
    kh_n, kw_n = g.k
    (sh, sw), (dh, dw), (ph, pw) = g.s, g.d, g.p
    br = (rows - 1) * sh + (kh_n - 1) * dh + 1  # input rows of the band
    w(f"float xp[{br * wp}] OPFUSE_ALIGNED;")  # gcc -march=native stores with aligned vector moves
    w(f"float u[{rows * g.ow}] OPFUSE_ALIGNED;")
    w(f"for (int i = 0; i < {br * wp}; ++i) xp[i] = 0.0f;")
    w.open(f"for (int r = 0; r < {br}; ++r)")
    w(f"const int ih = oh0*{sh} - {ph} + r;")
    w(f"if (ih < 0 || ih >= {g.ih}) continue;")
    if sw == 1:
        w(f"for (int i = 0; i < {g.iw}; ++i) xp[r*{wp} + {pw} + i] = xc[ih*{g.iw} + i];")
    else:  # split the row into its sw column phases: the taps then load contiguous vectors
        hw = wp // sw
        for f in range(sw):
            j0 = next((j for j in range(hw) if j * sw + f >= pw), hw)
            j1 = next((j for j in range(hw) if j * sw + f - pw >= g.iw), hw)
            if j0 < j1:
                w(f"for (int j = {j0}; j < {j1}; ++j) xp[r*{wp} + {f * hw} + j] = "
                  f"xc[ih*{g.iw} + j*{sw} + {f - pw}];")
    w.close()

    def tap_sum(base: str, step: int) -> str:
        terms = ["bv"]
        for kh in range(kh_n):
            for kw in range(kw_n):
                col = kw * dw
                if step > 1:  # phase layout (see the band copy)
                    col = (col % step) * (wp // step) + col // step
                off = kh * dh * wp + col
                idx = base + (f" + {off}" if off else "")
                terms.append(f"w{kh * kw_n + kw} * xp[{idx}]")
        return " + ".join(terms)

    if sw == 1 and sh == 1:
        span = (rows - 1) * wp + g.ow
        w(f"float t[{span}] OPFUSE_ALIGNED;")
        w(f"for (int q = 0; q < {span}; ++q) t[q] = {tap_sum('q', 1)};")
        w(f"for (int r = 0; r < {rows}; ++r) for (int i = 0; i < {g.ow}; ++i) "
          f"u[r*{g.ow} + i] = t[r*{wp} + i];")
    else:
        w.open(f"for (int r = 0; r < {rows}; ++r)")
        w(f"const float *xr = xp + r*{sh * wp};")
        w(f"for (int i = 0; i < {g.ow}; ++i) u[r*{g.ow} + i] = "
          f"{tap_sum('i', sw).replace('xp[', 'xr[')};")
        w.close()
    plane = g.oh * g.ow
    if flat is not None:
        emit_apply(w, chain, flat, ["n", "c", f"oh0*{g.ow}"], rows * g.ow, lambda i: f"u[{i}]",
                   lambda i: f"{y}[(n*{g.c} + c)*{plane} + oh0*{g.ow} + {i}]")
        return
    vs = [o.strides for o in chain.operands]
    w.open(f"for (int r = 0; r < {rows}; ++r)")
    emit_apply(w, chain, vs, ["n", "c", "oh0 + r", "0"], g.ow, lambda i: f"u[r*{g.ow} + {i}]",
               lambda i: f"{y}[(n*{g.c} + c)*{plane} + (oh0 + r)*{g.ow} + {i}]")
    w.close()
