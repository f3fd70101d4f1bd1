"""The int16 scratch the matrix core (``matmul_dsp``) reads: a tile of output pixels' input
windows, channel-contiguous, gathered from the NCHW activations (docs/architecture.md, "int8
matrix kernels on Cortex-M").

Entries are int16, stored in pairs in an int32 array (the low half first, ``PAIR``), so the
core reads them with aligned word and double-word loads. Each entry is ``x - z_x`` (taps outside the input are 0, TFLite's padding by the zero point),
or the raw ``x`` where the zero point is folded into the bias (``raw``: a pointwise conv or a
Gemm, which have no padding). The reduction order is chosen so the inner copies have constant
offsets, and the weights are laid out in the same order (``order``):

* ``pointwise`` (1x1, stride 1, no padding): k = ic;
* ``taps`` (input channels a multiple of 4): k = tap*ICg + ic, one bounds test per tap;
* ``channels`` (kernel width a multiple of 4): k = ic*taps + tap, whole quads per kernel row;
* ``generic``: k = ic*taps + tap with the index computed per entry (small first layers).
"""

from __future__ import annotations

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.int8.matmul_dsp import QUAD


def order(g, pointwise: bool) -> str:  # noqa: ANN001
    if pointwise:
        return "pointwise"
    if g.icg % QUAD == 0:
        return "taps"
    if g.k[1] % QUAD == 0:
        return "channels"
    return "generic"


def reduction_rows(weights: np.ndarray, g, mode: str) -> np.ndarray:  # noqa: ANN001
    """The [OC][K] weight rows in the reduction order of ``mode``."""
    w4 = weights.reshape(g.oc, g.icg, g.k[0] * g.k[1])
    if mode == "taps":
        w4 = w4.transpose(0, 2, 1)
    return w4.reshape(g.oc, -1)


PAIR = "(int32_t)((uint32_t)(uint16_t)({}) | ((uint32_t)({}) << 16))"  # two int16 entries


def _quad(w: CWriter, at: int | str, entries: list[str]) -> None:
    """The four entries of one reduction quad of a column into ``d[at]``, ``d[at + 1]``."""
    entries = entries + ["0"] * (QUAD - len(entries))
    w(f"d[{at}] = {PAIR.format(entries[0], entries[1])};")
    w(f"d[{at} + 1] = {PAIR.format(entries[2], entries[3])};")


def emit_fill(w: CWriter, g, mode: str, *, col: str, stride: int, q: int, x: str,  # noqa: ANN001
              xct: str, zx: int) -> None:
    """Column ``q`` of ``col`` (``stride`` columns) for output pixel ``p0 + q`` of group input
    ``x``."""
    plane = g.ih * g.iw
    k = g.icg * g.k[0] * g.k[1]
    step = stride * 2  # int32 words between reduction quads of one column
    sub = f" - {zx}" if zx else ""
    w.open("")
    w(f"int32_t *d = {col} + {q * 2};")
    if mode == "pointwise":
        w(f"const {xct} *s = {x} + p0 + {q};")
        full = g.icg - g.icg % QUAD
        w.open(f"for (int ic = 0; ic < {full}; ic += {QUAD}, d += {step})")
        _quad(w, 0, [f"s[(ic + {lane})*{plane}]" for lane in range(QUAD)])
        w.close()
        if full < g.icg:
            _quad(w, 0, [f"s[{ic}*{plane}]" for ic in range(full, g.icg)])
        w.close()
        return
    (sh, sw), (dh, dw), (ph, pw) = g.s, g.d, g.p
    w(f"const int oh = (p0 + {q}) / {g.ow}, ow = (p0 + {q}) % {g.ow};")
    w(f"const int ih0 = oh*{sh} - {ph}, iw0 = ow*{sw} - {pw};")
    if mode == "taps":
        w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
        w(f"const int ih = ih0 + kh*{dh};")
        for kw in range(g.k[1]):
            w.open("")
            w(f"const int iw = iw0 + {kw * dw};")
            w(f"int32_t *t = d + (kh*{g.k[1]} + {kw})*{g.icg // QUAD * step};")
            w.open(f"if ((unsigned)ih < {g.ih}u && (unsigned)iw < {g.iw}u)")
            w(f"const {xct} *s = {x} + ih*{g.iw} + iw;")
            w.open(f"for (int ic = 0; ic < {g.icg}; ic += {QUAD}, t += {step})")
            e = [f"s[(ic + {lane})*{plane}]{sub}" for lane in range(QUAD)]
            w(f"t[0] = {PAIR.format(e[0], e[1])};")
            w(f"t[1] = {PAIR.format(e[2], e[3])};")
            w.close()
            w.close()
            w.open("else")
            w(f"for (int ic = 0; ic < {g.icg}; ic += {QUAD}, t += {step}) t[0] = t[1] = 0;")
            w.close()
            w.close()
        w.close()
    elif mode == "channels":
        quads = g.k[1] // QUAD
        w.open(f"for (int ic = 0; ic < {g.icg}; ++ic)")
        w(f"const {xct} *s = {x} + ic*{plane};")
        w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh, d += {quads * step})")
        w(f"const int ih = ih0 + kh*{dh};")
        w(f"const {xct} *r = s + ih*{g.iw} + iw0;")
        w(f"const int okh = (unsigned)ih < {g.ih}u;")
        for kq in range(quads):
            _quad(w, kq * step, [_tap(g, "okh", "r", kq * QUAD + lane, sub)
                                 for lane in range(QUAD)])
        w.close()
        w.close()
    else:  # small: every entry unrolled, k = (ic*KH + kh)*KW + kw
        entries = []
        for ic in range(g.icg):
            for kh in range(g.k[0]):
                w(f"const int ok{ic}_{kh} = (unsigned)(ih0 + {kh * dh}) < {g.ih}u;")
                for kw in range(g.k[1]):
                    row = f"({x} + {ic * plane} + (ih0 + {kh * dh})*{g.iw} + iw0)"
                    entries.append(_tap(g, f"ok{ic}_{kh}", row, kw, sub))
        for kb in range(-(-k // QUAD)):
            _quad(w, kb * step, entries[kb * QUAD:(kb + 1) * QUAD])
    w.close()


def _tap(g, ok: str, row: str, kw: int, sub: str) -> str:  # noqa: ANN001
    """Entry of kernel column ``kw`` on input row pointer ``row`` (valid when ``ok``)."""
    dw = g.d[1]
    return (f"({ok} && (unsigned)(iw0 + {kw * dw}) < {g.iw}u ? "
            f"{row}[{kw * dw}]{sub} : 0)")


def emit_fill_row(w: CWriter, *, col: str, stride: int, q: int, src: str, xct: str,
                  k: int) -> None:
    """Column ``q`` of ``col`` (``stride`` columns) from the contiguous vector ``src`` of ``k``
    entries, raw (a Gemm's row: its zero point is folded into the bias)."""
    full = k - k % QUAD
    w.open("")
    w(f"int32_t *d = {col} + {q * 2};")
    w(f"const {xct} *s = {src};")
    w.open(f"for (int kk = 0; kk < {full}; kk += {QUAD}, d += {stride * 2})")
    _quad(w, 0, [f"s[kk + {lane}]" for lane in range(QUAD)])
    w.close()
    if full < k:
        _quad(w, 0, [f"s[{kk}]" for kk in range(full, k)])
    w.close()
