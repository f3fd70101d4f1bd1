"""Pixel tiles of a float conv for a scalar FPU (the ``pixels`` path of kernelplan/convf.py), layer
by layer and as a cascade member, and of a vector unit's stem layer by layer: one loop nest, its
rows read through a ``RowSource``. On a vector unit gcc vectorizes the loop over a row's columns
(every tap unrolled, the line buffer's phase rows rounded to ``plan.align`` floats).

A vector unit's column and channel tiles (pointwise.py, convrows.py, cascade_rows.py) keep their
sums in arrays it holds in registers; on a scalar FPU (Cortex-M4/M7/M33) every multiply-add of those
tiles loads and stores its sum. Here one output pixel's ``lanes`` channels are scalar sums, kept in
registers over every input channel and tap: per tap the input is loaded once and each channel's
weight once, and each value is finished once. The weights are packed ``[block][ICg][KH][KW][lanes]``
(convdirect.pack_weights, zero-padded channels). A 1x1 stride-1 unpadded conv reads its input rows
in place; any other conv first copies the KH rows of every input channel, zero-padded and split
into column phases, into a line buffer once per output row (linebuffer.py), so the
tile has no bounds test.

The driver ``emit_pixel_conv`` serves a whole tensor (``rows`` None: every image and row, the
layer-by-layer kernel, its epilogue chain applied on a row of each channel) and a cascade member's
rows ``a .. b`` of a ring (its epilogue C statements on each scalar ``v``, stored into the ring).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.convdirect import pack_weights
from opfuse.backends.c.epilogue import Chain, emit_apply
from opfuse.backends.c.linebuffer import fill_rows, phase_copy, tap_offsets
from opfuse.backends.c.rowsource import RowSource
from opfuse.ir.values import const
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.kernelplan.convf import FloatConvPlan, line_floats, line_width


@dataclass(frozen=True)
class PixelTile:
    """``taps``: offsets of a tap's input from the row of input channel ``ci`` (the C pointer
    ``row``); the packed weights ``wp`` and bias ``bp``; the block geometry."""

    taps: list[int]
    row: str
    wp: str
    bp: str | None
    group: int
    icg: int
    ocg: int
    lanes: int
    w_out: int
    unrolled: bool

    @property
    def blocks(self) -> int:
        return -(-self.ocg // self.lanes)


def pixel_tiles(w: CWriter, tl: PixelTile, finish: Callable[[int], None],
                before: Callable[[], None] = lambda: None,
                after: Callable[[], None] = lambda: None) -> None:
    """For each block of ``tl.lanes`` channels, each column ``i`` of the output row as that many
    scalar sums ``a<o>`` over the block's input channels and taps; ``finish(o)`` writes the C of
    sum ``o`` of channel ``c`` (the block's real channels only), ``before`` / ``after`` the C
    around a block's row."""
    ocb, kk = tl.lanes, len(tl.taps)
    last = tl.ocg - (tl.blocks - 1) * ocb
    w.open(f"for (int grp = 0; grp < {tl.group}; ++grp) for (int ob = 0; ob < {tl.blocks}; ++ob)")
    w(f"const int blk = grp*{tl.blocks} + ob;")
    w(f"const float *wb = {tl.wp} + blk*{tl.icg * kk * ocb};")
    before()
    w.open(f"for (int i = 0; i < {tl.w_out}; ++i)")
    init = (lambda o: f"{tl.bp}[blk*{ocb} + {o}]") if tl.bp else (lambda o: "0.0f")
    w(" ".join(f"float a{o} = {init(o)};" for o in range(ocb)))

    def taps(j: str, wj: str) -> None:
        w(f"const int ci = grp*{tl.icg} + {j};")
        w(f"const float *xr = {tl.row} + i;")
        for t, off in enumerate(tl.taps):
            w(f"{{ const float xv = xr[{off}]; "
              + " ".join(f"a{o} += {wj}[{t * ocb + o}] * xv;" for o in range(ocb)) + " }")

    if tl.unrolled:
        for j in range(tl.icg):
            w.open("")
            taps(str(j), f"(wb + {j * kk * ocb})")
            w.close()
    else:
        w.open(f"for (int j = 0; j < {tl.icg}; ++j)")
        w(f"const float *wj = wb + j*{kk * ocb};")
        taps("j", "wj")
        w.close()
    for o in range(ocb):
        w.open("" if last == ocb or o < last else f"if (ob < {tl.blocks - 1})")
        w(f"const int c = grp*{tl.ocg} + ob*{ocb} + {o};")
        w("(void)c;")
        finish(o)
        w.close()
    w.close()
    after()
    w.close()


def emit_pixel_conv(w: CWriter, node: ir.Node, g: ConvGeom, plan: FloatConvPlan, src: RowSource,
                    dst: RowSource, rows: tuple[str, str] | None, params,  # noqa: ANN001
                    epilogue: list[str] = (), chain: Chain | None = None,
                    bias: str | None = None) -> None:
    """``node``'s output rows as pixel tiles: every row of every image (``rows`` None; ``chain``
    applied on each channel's row, through a row buffer), or rows ``rows[0] .. rows[1]`` of a
    cascade member (``epilogue`` statements on each ``v``, stored into ``dst``). ``bias``: the
    kernel's own pointer to the bias, read where no block is zero-padded."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl) = g.k, g.s, g.d, g.p
    lanes = plan.lanes
    blocks = -(-g.ocg // lanes)
    weight = np.asarray(const(node.inputs[1]), np.float32)
    blocks_of = [(b * lanes, min(lanes, g.ocg - b * lanes), lanes) for b in range(blocks)]
    packed, _ = pack_weights(weight.reshape(g.oc, g.icg, kh, kw), g.group, blocks_of)
    wp = params.weight(f"{node.inputs[1].name}#tile{lanes}", packed)
    bp = None
    if bias is not None and g.ocg % lanes == 0:
        bp = bias  # block b's channel o is channel b*lanes + o
    elif len(node.inputs) > 2 and node.inputs[2] is not None:
        if bias is not None:
            w(f"(void){bias};")
        padded = np.zeros((g.group, blocks * lanes), np.float32)
        padded[:, :g.ocg] = np.asarray(const(node.inputs[2]), np.float32).reshape(g.group, g.ocg)
        bp = params.weight(f"{node.inputs[2].name}#tile{lanes}", padded.ravel())
    direct = line_floats(g) == 0 and not src.is_nhwc  # an NHWC row: copied
    lw = -(-line_width(g, g.ow) // plan.align) * plan.align
    per_ci = kh * sw * lw
    n = "n" if rows is None else "0"
    if rows is None:
        w.open(f"for (int n = 0; n < {g.n}; ++n) for (int r = 0; r < {g.oh}; ++r)")
    else:
        w.open(f"for (int r = {rows[0]}; r <= {rows[1]}; ++r)")
    w(f"const int yrow = {dst.row('r')};")
    if direct:
        w(f"const int xrow = {src.row('r')};")
    elif plan.align > 1:  # a vector unit's: one copy loop per phase, which gcc vectorizes
        w(f"float line[{g.c * per_ci}] OPFUSE_ALIGNED;")
        w.open(f"for (int ci = 0; ci < {g.c}; ++ci) for (int ky = 0; ky < {kh}; ++ky)")
        w(f"const int iy = r*{sh} - {pt} + ky*{dh};")
        w(f"float *q = line + ci*{per_ci} + ky*{sw * lw};")
        w.open(f"if (iy < 0 || iy >= {g.ih})")
        w(f"for (int j = 0; j < {sw * lw}; ++j) q[j] = 0.0f;")
        w("continue;")
        w.close()
        w(f"const float *xr = {src.channel(n, 'ci')} + {src.row('iy')};")
        phase_copy(w, "q", "xr", sw, lw, pl, g.iw, src.pixel)
        w.close()
    else:
        fill_rows(w, channels=g.c, kh=kh, per_ci=per_ci, sw=sw, lw=lw, pl=pl, w_in=g.iw,
                  h_in=g.ih, first_row=lambda ky: f"r*{sh} - {pt} + {ky * dh}", slot=src.row,
                  row=lambda ky: f"{src.channel(n, 'ci')} + sl{ky}", pixel=src.pixel)
    tile = PixelTile(
        taps=list(tap_offsets(kh, kw, sw, dw, lw)),
        row=f"{src.channel(n, 'ci')} + xrow" if direct else f"line + ci*{per_ci}",
        wp=wp, bp=bp, group=g.group, icg=g.icg, ocg=g.ocg, lanes=lanes, w_out=g.ow,
        unrolled=plan.unrolled)
    if chain is None:  # a member: its epilogue on each value, stored into its ring
        def finish(o: int) -> None:
            w(f"float v = a{o};")
            for line in epilogue:
                w(line)
            w(f"({dst.channel(n, 'c')})[yrow + i] = v;")

        pixel_tiles(w, tile, finish)
    else:  # a whole tensor: each channel's row through the chain
        last = g.ocg - (blocks - 1) * lanes
        count = str(lanes) if last == lanes else f"(ob == {blocks - 1} ? {last} : {lanes})"
        vs = [o.strides for o in chain.operands]

        def after() -> None:
            w.open(f"for (int o = 0; o < {count}; ++o)")
            w(f"const int c = grp*{g.ocg} + ob*{lanes} + o;")
            emit_apply(w, chain, vs, ["n", "c", "r", "0"], g.ow, lambda i: f"row[o][{i}]",
                       lambda i: f"({dst.channel(n, 'c')})[yrow + {i}]")
            w.close()

        pixel_tiles(w, tile, lambda o: w(f"row[{o}][i] = a{o};"),
                    lambda: w(f"float row[{lanes}][{g.ow}];"), after)
    w.close()
