"""The int16 scratch the matrix core (``matmul_dsp``) reads: a tile of output pixels' input
windows, channel-contiguous, gathered from the NCHW activations (docs/architecture.md, "int8
matrix kernels on Cortex-M").

Each entry is ``x - z_x`` (taps outside the input are 0, TFLite's padding by the zero point),
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
from opfuse.backends.c.int8.matmul_dsp import QUAD, padded


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


def emit_fill(w: CWriter, g, mode: str, *, col: str, stride: int, q: int, x: str,  # noqa: ANN001
              xct: str, zx: int) -> None:
    """Column ``q`` of ``col`` (``stride`` columns) for output pixel ``p0 + q`` of group input
    ``x``."""
    plane = g.ih * g.iw
    kp = padded(g.icg * g.k[0] * g.k[1])
    step = stride * QUAD  # int16 entries between reduction quads of one column
    w.open("")
    w(f"int16_t *d = {col} + {q * QUAD};")
    if mode == "pointwise":
        w(f"const {xct} *s = {x} + p0 + {q};")
        w.open(f"for (int ic = 0; ic < {g.icg - g.icg % QUAD}; ic += {QUAD})")
        for lane in range(QUAD):
            w(f"d[{lane}] = s[(ic + {lane})*{plane}];")
        w(f"d += {step};")
        w.close()
        _tail(w, g.icg, kp, lambda lane: f"s[{g.icg - g.icg % QUAD + lane}*{plane}]")
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
            w(f"int16_t *t = d + (kh*{g.k[1]} + {kw})*{g.icg // QUAD * step};")
            w.open(f"if ((unsigned)ih < {g.ih}u && (unsigned)iw < {g.iw}u)")
            w(f"const {xct} *s = {x} + ih*{g.iw} + iw;")
            w.open(f"for (int ic = 0; ic < {g.icg}; ic += {QUAD}, t += {step})")
            for lane in range(QUAD):
                w(f"t[{lane}] = (int16_t)(s[(ic + {lane})*{plane}] - {zx});")
            w.close()
            w.close()
            w.open("else")
            w(f"for (int ic = 0; ic < {g.icg}; ic += {QUAD}, t += {step}) "
              "t[0] = t[1] = t[2] = t[3] = 0;")
            w.close()
            w.close()
        w.close()
    elif mode == "channels":
        quads = g.k[1] // QUAD
        w.open(f"for (int ic = 0; ic < {g.icg}; ++ic)")
        w(f"const {xct} *s = {x} + ic*{plane};")
        w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
        w(f"const int ih = ih0 + kh*{dh};")
        w(f"const int okh = (unsigned)ih < {g.ih}u;")
        for kq in range(quads):
            for lane in range(QUAD):
                kw = kq * QUAD + lane
                w(f"{{ const int iw = iw0 + {kw * dw}; "
                  f"d[{kq * step + lane}] = (int16_t)(okh && (unsigned)iw < {g.iw}u ? "
                  f"s[ih*{g.iw} + iw] - {zx} : 0); }}")
        w(f"d += {quads * step};")
        w.close()
        w.close()
    else:
        w.open(f"for (int ic = 0, k = 0; ic < {g.icg}; ++ic)")
        w(f"const {xct} *s = {x} + ic*{plane};")
        w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
        w(f"const int ih = ih0 + kh*{dh};")
        w.open(f"for (int kw = 0; kw < {g.k[1]}; ++kw, ++k)")
        w(f"const int iw = iw0 + kw*{dw};")
        w(f"d[(k >> 2)*{step} + (k & 3)] = (int16_t)((unsigned)ih < {g.ih}u && "
          f"(unsigned)iw < {g.iw}u ? s[ih*{g.iw} + iw] - {zx} : 0);")
        w.close()
        w.close()
        w.close()
        k = g.icg * g.k[0] * g.k[1]
        for kk in range(k, kp):
            w(f"d[{kk // QUAD * step + kk % QUAD}] = 0;")
    w.close()


def _tail(w: CWriter, k: int, kp: int, src) -> None:  # noqa: ANN001
    """The last, partial quad of a column (``d`` points at it): entries past ``k`` are 0."""
    done = k - k % QUAD
    for lane in range(kp - done):
        w(f"d[{lane}] = {src(lane) if done + lane < k else '0'};")


def emit_fill_row(w: CWriter, *, col: str, stride: int, q: int, src: str, xct: str,
                  k: int) -> None:
    """Column ``q`` of ``col`` (``stride`` columns) from the contiguous vector ``src`` of ``k``
    entries, raw (a Gemm's row: its zero point is folded into the bias)."""
    w.open("")
    w(f"int16_t *d = {col} + {q * QUAD};")
    w(f"const {xct} *s = {src};")
    w.open(f"for (int kk = 0; kk < {k - k % QUAD}; kk += {QUAD}, d += {stride * QUAD})")
    w("d[0] = s[kk]; d[1] = s[kk + 1]; d[2] = s[kk + 2]; d[3] = s[kk + 3];")
    w.close()
    _tail(w, k, padded(k), lambda lane: f"s[{k - k % QUAD + lane}]")
    w.close()
