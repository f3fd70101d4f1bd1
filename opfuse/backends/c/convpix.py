"""Pixel-vectorized direct convolution for convs with few input channels x taps (a network's stem,
e.g. 3 -> 32 channels, 3x3, stride 2): vectorized over output columns, so every store is a
contiguous run of one output row (the channel-vectorized tile of convdirect.py stores
transposed: OCV scattered 8-float pieces per pixel tile, which dominates when each output
needs only ~27 multiply-adds).

Per output row, the KH input rows of every input channel are split into their S column phases
(S = horizontal stride) with the horizontal padding written as zeros, into a small stack buffer:
``ph[ic][kh][phase][L + j] = x[ic][ih][j*S + phase]``. An input column ``ow*S - P + kw*D`` is
then ``ph[..][(kw*D - P) mod S][L + ow + floor((kw*D - P) / S)]``, so each tap is a contiguous
vector load at a compile-time offset. The tile is OCB output channels x one output row, the
column loop is the vector loop; per tap the input vector is loaded once and each channel's weight
broadcast. The epilogue chain runs on the row buffer and stores it once, row-contiguous.
"""

from __future__ import annotations

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.epilogue import Chain, emit_apply
from opfuse.backends.c.rowsource import RowSource

MAX_TAPS = 32  # icg * kh * kw at most this many
OCB = 8  # output channels per tile
PW = 16  # rows at least this wide


def fits(g, arr: np.ndarray | None) -> bool:
    """Whether the pixel-vectorized path is the better one for this conv."""
    taps = g.icg * g.k[0] * g.k[1]
    return (arr is not None and g.group == 1 and taps <= MAX_TAPS and g.ow >= PW
            and g.oc >= OCB and g.s[1] <= 4)


def _phases(g) -> tuple[int, int, list[int]]:
    """(L, PL, per-tap offsets into one (ic, kh) phase block of S*PL floats)."""
    s = g.s[1]
    qs = [kw * g.d[1] - g.p[1] for kw in range(g.k[1])]
    shifts = [q // s for q in qs]  # floor division, also for negative q
    lead = max(0, -min(shifts))
    width = lead + g.ow + max(0, max(shifts)) + 1
    width = -(-width // 8) * 8
    offs = [(q % s) * width + lead + sh for q, sh in zip(qs, shifts, strict=True)]
    return lead, width, offs


def emit_pixels(w: CWriter, g, x: str, wt: str, b: str | None, chain: Chain, y: str,
                src: RowSource | None = None) -> None:
    """The kernel body; ``wt`` the weights in ONNX order [OC][ICg][KH][KW] (= [OC][tap]).
    ``src``: where the input rows are when not the NCHW tensor ``x`` (an NHWC graph input read
    in place, fusion/views.py); only the phase copy addresses the input."""
    s, kh_n = g.s[1], g.k[0]
    lead, width, offs = _phases(g)
    block = s * width
    taps = [(ic * kh_n + kh) * block + off
            for ic in range(g.icg) for kh in range(kh_n) for off in offs]
    vs = [o.strides for o in chain.operands]
    w(f"float ph[{g.icg * kh_n * block}] OPFUSE_ALIGNED;")
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    if src is None:
        w(f"const float *xn = {x} + n*{g.c * g.ih * g.iw};")
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
    w.open(f"for (int ic = 0; ic < {g.icg}; ++ic) for (int kh = 0; kh < {kh_n}; ++kh)")
    w(f"const int ih = oh*{g.s[0]} - {g.p[0]} + kh*{g.d[0]};")
    w(f"float *pr = ph + (ic*{kh_n} + kh)*{block};")
    w.open(f"if (ih < 0 || ih >= {g.ih})")
    w(f"for (int i = 0; i < {block}; ++i) pr[i] = 0.0f;")
    w("continue;")
    w.close()
    if src is None:
        w(f"const float *xr = xn + ic*{g.ih * g.iw} + ih*{g.iw};")
    else:
        w(f"const float *xr = {src.channel('n', 'ic')} + {src.row('ih')};")
    step = s if src is None else s * src.pixel  # elements between a phase's columns
    for f in range(s):  # the valid columns of phase f, known at compile time
        lo = next((j for j in range(width) if (j - lead) * s + f >= 0), width)
        hi = next((j for j in range(width) if (j - lead) * s + f >= g.iw), width)
        base = f"pr + {f * width}" if f else "pr"
        first = f - lead * s if src is None else src.col(f - lead * s)
        w(f"{{ float *q = {base}; const float *xs = xr + {first}; "
          f"for (int j = 0; j < {lo}; ++j) q[j] = 0.0f; "
          f"for (int j = {lo}; j < {hi}; ++j) q[j] = xs[j*{step}]; "
          f"for (int j = {hi}; j < {width}; ++j) q[j] = 0.0f; }}")
    w.close()
    full, rest = divmod(g.oc, OCB)
    for count, ocb, start in ((full, OCB, 0), (1 if rest else 0, rest, full * OCB)):
        if count == 0:
            continue
        w.open(f"for (int ob = 0; ob < {count}; ++ob)")
        w(f"const int oc0 = {start} + ob*{ocb};")
        _row(w, g, taps, ocb, b, wt, chain, vs, y)
        w.close()
    w.close()
    w.close()


def _row(w: CWriter, g, taps: list[int], ocb: int, b, wt: str, chain: Chain, vs, y: str) -> None:
    """One output row of ``ocb`` channels: the loop over columns is the vector loop; per column
    every tap's input is loaded once and multiplied by each channel's (broadcast) weight."""
    t = len(taps)
    w(f"float acc[{ocb}][{g.ow}];")
    w(f"const float *wj = {wt} + oc0*{t};")
    w.open(f"for (int i = 0; i < {g.ow}; ++i)")
    for j in range(ocb):
        w(f"float a{j} = {f'{b}[oc0 + {j}]' if b is not None else '0.0f'};")
    for k, off in enumerate(taps):
        w(f"{{ const float xv = ph[{off} + i]; "
          + " ".join(f"a{j} += wj[{j * t + k}] * xv;" for j in range(ocb)) + " }")
    for j in range(ocb):
        w(f"acc[{j}][i] = a{j};")
    w.close()
    plane = g.oh * g.ow
    w.open(f"for (int j = 0; j < {ocb}; ++j)")
    emit_apply(w, chain, vs, ["n", "oc0 + j", "oh", "0"], g.ow, lambda i: f"acc[j][{i}]",
               lambda i: f"{y}[(n*{g.oc} + oc0 + j)*{plane} + oh*{g.ow} + {i}]")
    w.close()
