"""The portable int8 spatial conv (kernelplan/conv8.py's ``conv_rows`` path, layer by layer) as the
pointwise family's column tiles (opfuse/backends/c/pointwise.py) over a line buffer
(linebuffer.py), the way a float cascade member's conv is written (cascade_rows.py): per output
row, the KH input rows of every channel are copied once, split into column phases and padded with
the input's zero point (a row outside the input too: TFLite's padding value), so each tap of a
tile reads a constant offset with no bounds test. A padded tap then adds ``z_x w``, which the
bias has subtracted with every other tap's (``pointwise.folded_bias``): the sums are TFLite's
``sum (x - z_x) w`` over the taps inside the input. Arithmetic, requantization, chain and store
are ``Int8Sums``' and the pointwise conv's (int8/pointwise.py).

A graph input's NHWC rows read in place (a TFLite model's stem, ``RowSource.nhwc``) keep
``conv.emit_row_taps``: gathered into this line buffer byte by byte, pretrainedResnet_quant's
stem ran 1.74M instructions where the row taps ran 2.40M, yet took 1.7x the time (perf samples,
-march=x86-64-v2; mcunet_vww's stride-2 stem 1.2x)."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.pointwise import Int8Sums, store_tile
from opfuse.backends.c.linebuffer import fill_rows, tap_offsets
from opfuse.backends.c.pointwise import ColumnTile, column_tiles
from opfuse.backends.c.rowsource import RowSource
from opfuse.kernelplan.conv8 import PIX_TILE, ConvGeom
from opfuse.kernelplan.convf import line_width

LINE_BYTES = 32 * 1024  # the line buffer on the stack, at most (else emit_row_taps)


def line_bytes(g: ConvGeom) -> int:
    """Bytes of the line buffer: the float one's element count (kernelplan/convf.py)."""
    return g.c * g.k[0] * g.s[1] * line_width(g, g.ow)


def fits(g: ConvGeom) -> bool:
    """Whether the line buffer of ``g`` stays under ``LINE_BYTES``."""
    return line_bytes(g) <= LINE_BYTES


def emit_row_tiles8(w: CWriter, g: ConvGeom, zx: int, ocb: int, src: RowSource, wt: str, b: str,
                    sums: Int8Sums, chain: Chain8 | None, rank: int, y: str) -> None:
    """Every output row of every image: the line buffer of the NCHW input ``src``, then column
    tiles of ``ocb`` channels (weights ``wt`` packed
    ``[OC/ocb][ICg][KH][KW][ocb]``, ``conv.packed_weights``; ``b`` the bias with z_x folded in
    over every tap) x at most ``PIX_TILE`` columns, into the NCHW output ``y``."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl) = g.k, g.s, g.d, g.p
    lw = line_width(g, g.ow)
    per_ci = kh * sw * lw
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int r = 0; r < {g.oh}; ++r)")
    fill_rows(w, channels=g.c, kh=kh, per_ci=per_ci, sw=sw, lw=lw, pl=pl, w_in=g.iw,
              h_in=g.ih, first_row=lambda ky: f"r*{sh} - {pt} + {ky * dh}",
              slot=lambda iy: iy,
              row=lambda ky: f"{src.channel('n', 'ci')} + sl{ky}*{src.width}",
              pixel=src.pixel, ctype=sums.in_type, pad=str(zx))
    tl = ColumnTile(
        taps=tap_offsets(kh, kw, sw, dw, lw),
        row=f"line + ci*{per_ci}", wp=wt, bp=b, group=g.group, icg=g.icg, ocg=g.ocg,
        lanes=ocb, columns=g.ow, width=min(g.ow, PIX_TILE), arith=sums)
    column_tiles(w, tl, lambda width: store_tile(w, tl, g, sums, chain, rank, y, width, "r"))
    w.close()
    w.close()
