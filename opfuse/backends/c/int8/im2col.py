"""The scratch the ISA's matrix tile (``IsaKernels.matrix_core``) reads: a tile of output pixels' input windows,
channel-contiguous, gathered from NCHW rows (docs/architecture.md, "int8 matrix kernels on
Cortex-M").

One ``int64_t`` per reduction quad and column: four int16 entries, lowest first (``QUAD4``), so
the core loads a column's quad with one LDRD (an ISA's ``Packing`` may hold the four as bytes
instead: isa/mve/narrow.py, for int8 inputs). Each entry is the raw ``x``, and ``z_x`` for taps
outside the input (TFLite pads with the zero point): sum (x - z_x) w = sum x w - z_x sum w over the
whole window, so the zero point is folded into the bias of every conv and Gemm, and no entry is
offset at run time. A window wholly inside the input is gathered without a test per entry. The
reduction order is chosen so the copies
have constant offsets, and the weights are laid out in the same order (``order``):

* ``pointwise`` (1x1, stride 1, no padding): k = ic;
* ``taps`` (input channels a multiple of 4): k = tap*ICg + ic, one bounds test per tap;
* ``channels`` (kernel width a multiple of 4): k = ic*taps + tap, whole quads per kernel row;
* ``generic``: k = ic*taps + tap, unrolled inside the input, staged entry by entry at the border
  (small first layers).

The rows come from a ``RowSource``: a whole NCHW plane (the layer-by-layer conv), a cascade's
ring of rows (opfuse/backends/c/int8/cascade.py), or a whole NHWC input read in place (a TFLite
model's first conv, fusion/views.py), so all run the same fill and the same core: every column
offset is ``src.col``, every channel step ``src.stride``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.base import QUAD
from opfuse.backends.c.rowsource import RowSource

PAIR = "(uint32_t)(uint16_t)({}) | ((uint32_t)({}) << 16)"
QUAD4 = "(int64_t)((uint64_t)(" + PAIR + ") | ((uint64_t)(" + PAIR + ") << 32))"


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


@dataclass(frozen=True)
class Packing:
    """How a scratch ``int64_t`` holds a quad's four entries: ``quad``, the C format of it from
    the entries; ``pad(zx)``, four entries of z_x as a constant. ``INT16`` (below) is the
    matrix core's own; an ISA may give a narrower one (``IsaKernels.narrow``)."""

    quad: str
    pad: Callable[[int], str]


def _pad_quad(zx: int) -> str:
    """Four entries of ``zx`` as one int64_t constant."""
    lane = zx & 0xFFFF
    return f"(int64_t)0x{lane:04x}{lane:04x}{lane:04x}{lane:04x}u" if zx else "0"


INT16 = Packing(QUAD4, _pad_quad)


def _quad(w: CWriter, at: int | str, entries: list[str], dst: str = "d",
          pk: Packing = INT16) -> None:
    """The four entries of one reduction quad of a column into ``dst[at]``."""
    e = entries + ["0"] * (QUAD - len(entries))
    w(f"{dst}[{at}] = {pk.quad.format(*e)};")


def emit_fill(w: CWriter, g, mode: str, *, col: str, stride: int, q: str,  # noqa: ANN001
              src: RowSource, oh: str | None, ow: str, xct: str, zx: int,
              gather: Callable[..., bool] | None = None, pk: Packing = INT16,
              reuse: tuple[str, str] | None = None) -> None:
    """Column ``q`` of ``col`` (``stride`` columns) for the output pixel at row ``oh``, column
    ``ow`` (``oh`` None: ``ow`` is the pixel's index in a whole plane, pointwise only). Entries
    are the raw ``x``, and ``zx`` (TFLite's padding value) for taps outside the input: the zero
    point is in the bias. ``gather``: the ISA's channel runs (``IsaKernels.fill_gather``); ``pk``:
    how a quad packs its entries. ``reuse``: (a C condition, the scratch offset from ``d``)
    under which the column at that offset holds the pixel one to the left in the same row (a
    cascade member's row): the ``taps`` order then copies the taps the two windows share
    (``reusable``) and gathers only the others."""
    w.open("")
    w(f"int64_t *d = {col} + {q};")
    if mode == "pointwise":
        pix = src.col(ow) if oh is None else f"{src.row(oh)} + {src.col(ow)}"
        w(f"const {xct} *s = {src.base} + {pix};")
        full = g.icg - g.icg % QUAD
        ch = src.stride

        def quad(ic: str, dst: str = "d") -> None:
            _quad(w, 0, [f"s[({ic} + {lane})*{ch}]" for lane in range(QUAD)], dst, pk)

        if gather is None or not gather(w, src="s", xct=xct, ch=ch, count=full, dst="d",
                                        stride=stride, quad=quad, ch_max=src.stride_max):
            w.open(f"for (int ic = 0; ic < {full}; ic += {QUAD}, d += {stride})")
            quad("ic")
            w.close()
        if full < g.icg:
            _quad(w, 0, [f"s[{ic * ch}]" for ic in range(full, g.icg)], pk=pk)
        w.close()
        return
    (sh, sw), (dh, dw), (ph, pw) = g.s, g.d, g.p
    w(f"const int ih0 = ({oh})*{sh} - {ph}, iw0 = ({ow})*{sw} - {pw};")
    if mode == "taps":
        _fill_taps(w, g, src, stride, xct, zx, gather, pk, reuse if reusable(g) else None)
        w.close()
        return
    span_h, span_w = (g.k[0] - 1) * dh + 1, (g.k[1] - 1) * dw + 1
    inside = span_h <= g.ih and span_w <= g.iw
    if inside:  # the whole window in the input: no test per entry
        w.open(f"if ((unsigned)ih0 <= {g.ih - span_h}u && (unsigned)iw0 <= {g.iw - span_w}u)")
        if mode == "generic":
            _fill_inside(w, g, src, stride, xct, pk)
        else:
            _fill_window(w, g, mode, src, stride, xct, zx, checked=False, pk=pk)
        w.close()
        w.open("else")
    if mode == "generic":
        _fill_generic(w, g, src, stride, xct, zx, pk)
    else:
        _fill_window(w, g, mode, src, stride, xct, zx, checked=True, pk=pk)
    if inside:
        w.close()
    w.close()


def _fill_inside(w: CWriter, g, src: RowSource, stride: int, xct: str,  # noqa: ANN001
                 pk: Packing) -> None:
    """The ``generic`` order for a window inside the input: every entry unrolled, no tests."""
    dh = g.d[0]
    for kh in range(g.k[0]):
        w(f"const {xct} *r{kh} = {src.base} + {src.row(f'ih0 + {kh * dh}')} + {src.col('iw0')};")
    entries = [_tap(g, None, f"(r{kh} + {ic * src.stride})", kw, 0, src.pixel)
               for ic in range(g.icg) for kh in range(g.k[0]) for kw in range(g.k[1])]
    for kb in range(-(-len(entries) // QUAD)):
        _quad(w, kb * stride, entries[kb * QUAD:(kb + 1) * QUAD], pk=pk)


def _fill_generic(w: CWriter, g, src: RowSource, stride: int, xct: str, zx: int,  # noqa: ANN001
                  pk: Packing) -> None:
    """k = ic*taps + tap for any shape: the window's entries staged in int16 by three small loops,
    then packed into quads (small first layers, where flash matters more than the gather)."""
    (dh, dw), k = g.d, g.icg * g.k[0] * g.k[1]
    kp = -(-k // QUAD) * QUAD
    w(f"int16_t e[{kp}];")
    w.open(f"for (int ic = 0, kk = 0; ic < {g.icg}; ++ic)")
    w(f"const {xct} *s = {src.base} + ic*{src.stride};")
    w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
    w(f"const int ih = ih0 + kh*{dh};")
    w(f"const int okh = (unsigned)ih < {g.ih}u;")
    w(f"const {xct} *r = okh ? s + {src.row('ih')} + {src.col('iw0')} : s;")
    w(f"for (int kw = 0; kw < {g.k[1]}; ++kw, ++kk) e[kk] = (int16_t)(okh && "
      f"(unsigned)(iw0 + kw*{dw}) < {g.iw}u ? r[kw*{dw * src.pixel}] : {zx});")
    w.close()
    w.close()
    if kp > k:
        w(f"for (int kk = {k}; kk < {kp}; ++kk) e[kk] = 0;")
    w(f"for (int kb = 0; kb < {kp // QUAD}; ++kb) d[kb*{stride}] = "
      f"{pk.quad.format('e[4*kb]', 'e[4*kb + 1]', 'e[4*kb + 2]', 'e[4*kb + 3]')};")


def _fill_window(w: CWriter, g, mode: str, src: RowSource, stride: int, xct: str,  # noqa: ANN001
                 zx: int, checked: bool, pk: Packing = INT16) -> None:
    """The ``channels`` order: k = ic*taps + tap, ``checked`` for the border."""
    dh = g.d[0]
    if mode == "channels":
        quads = g.k[1] // QUAD
        w.open(f"for (int ic = 0, kd = 0; ic < {g.icg}; ++ic)")
        w(f"const {xct} *s = {src.base} + ic*{src.stride};")
        w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh, kd += {quads * stride})")
        w(f"const int ih = ih0 + kh*{dh};")
        if checked:
            w(f"const int okh = (unsigned)ih < {g.ih}u;")
            w(f"const {xct} *r = okh ? s + {src.row('ih')} + {src.col('iw0')} : s;")
        else:
            w(f"const {xct} *r = s + {src.row('ih')} + {src.col('iw0')};")
        for kq in range(quads):
            _quad(w, f"kd + {kq * stride}",
                  [_tap(g, "okh" if checked else None, "r", kq * QUAD + lane, zx, src.pixel)
                   for lane in range(QUAD)], pk=pk)
        w.close()
        w.close()
        return


def reusable(g) -> bool:  # noqa: ANN001
    """Whether the fill copies the window of the pixel to the left: kernel column ``kw + 1`` of
    the one is column ``kw`` of the other (stride and dilation 1 along the row). At stride 2 only
    a third of a 3x3 window is shared: ResNet-8's stride-2 members then ran 11k instructions
    fewer (16 channels) and 25k more (32), for 148 bytes of code (cortex-m7)."""
    return g.d[1] == 1 and g.s[1] == 1 < g.k[1]


def _fill_taps(w: CWriter, g, src: RowSource, stride: int, xct: str, zx: int,  # noqa: ANN001
               gather: Callable[..., bool] | None = None, pk: Packing = INT16,
               reuse: tuple[str, str] | None = None) -> None:
    """k = tap*ICg + ic: per tap one bounds test, then whole quads of input channels. With
    ``reuse`` (``emit_fill``, ``reusable``) the window is first copied, in one run of quads, from
    the column of the pixel to the left shifted by one tap: its kernel column ``kw + 1`` is this
    one's ``kw`` (the same inputs, or the same padding), so only the last kernel column of each
    kernel row is gathered, over what the run copied there. On ResNet-8's cascades (3x3, 16-64
    channels) this alone took the cascaded build on cortex-m7 from 17,953,487 to 17,316,706
    instructions; layer by layer (conv_mcu.emit_band over a plane) from 17,409,376 to
    16,810,348."""
    dh, dw = g.d
    quads = g.icg // QUAD
    if reuse is not None:
        w(f"const int kw0 = {reuse[0]} ? {g.k[1] - g.s[1]} : 0;")
        w.open("if (kw0)")
        w(f"const int64_t *u = d + ({reuse[1]}) + {g.s[1] * quads * stride};")
        every = ((g.k[0] - 1) * g.k[1] + g.k[1] - g.s[1]) * quads * stride
        w(f"for (int i = 0; i < {every}; i += {stride}) d[i] = u[i];")
        w.close()
    w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
    w(f"const int ih = ih0 + kh*{dh};")
    w(f"const int okh = (unsigned)ih < {g.ih}u;")
    w(f"const {xct} *r = {src.base} + (okh ? {src.row('ih')} + {src.col('iw0')} : 0);")
    w.open(f"for (int kw = {'kw0' if reuse is not None else 0}; kw < {g.k[1]}; ++kw)")
    w(f"int64_t *t = d + (kh*{g.k[1]} + kw)*{quads * stride};")
    w.open(f"if (okh && (unsigned)(iw0 + kw*{dw}) < {g.iw}u)")
    w(f"const {xct} *s = r + kw*{dw * src.pixel};")

    def quad(ic: str) -> None:
        _quad(w, 0, [f"s[({ic} + {lane})*{src.stride}]" for lane in range(QUAD)], "t", pk)

    if gather is None or not gather(w, src="s", xct=xct, ch=src.stride, count=g.icg, dst="t",
                                    stride=stride, quad=quad, ch_max=src.stride_max):
        w.open(f"for (int ic = 0; ic < {g.icg}; ic += {QUAD}, t += {stride})")
        quad("ic")
        w.close()
    w.close()
    w.open("else")
    w(f"for (int ic = 0; ic < {quads}; ++ic, t += {stride}) t[0] = {pk.pad(zx)};")
    w.close()
    w.close()
    w.close()


def _tap(g, ok: str | None, row: str, kw: int, zx: int, pixel: int = 1) -> str:  # noqa: ANN001
    """Entry of kernel column ``kw`` on input row pointer ``row`` (columns ``pixel`` elements
    apart): where ``ok`` is None the window is inside the input, else the entry is valid when
    ``ok`` and the column is in."""
    dw = g.d[1]
    if ok is None:
        return f"{row}[{kw * dw * pixel}]"
    return f"({ok} && (unsigned)(iw0 + {kw * dw}) < {g.iw}u ? {row}[{kw * dw * pixel}] : {zx})"


def emit_fill_row(w: CWriter, *, col: str, stride: int, q: int, src: str, xct: str,
                  k: int) -> None:
    """Column ``q`` of ``col`` (``stride`` columns) from the contiguous vector ``src`` of ``k``
    entries, raw (a Gemm's row: its zero point is folded into the bias)."""
    full = k - k % QUAD
    w.open("")
    w(f"int64_t *d = {col} + {q};")
    w(f"const {xct} *s = {src};")
    w.open(f"for (int kk = 0; kk < {full}; kk += {QUAD}, d += {stride})")
    _quad(w, 0, [f"s[kk + {lane}]" for lane in range(QUAD)])
    w.close()
    if full < k:
        _quad(w, 0, [f"s[{kk}]" for kk in range(full, k)])
    w.close()
