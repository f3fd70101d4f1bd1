"""The portable int8 spatial conv (kernelplan/conv8.py's ``conv_rows`` path, and ``conv_lanes``: short
rows), layer by layer and as a cascade member, as the pointwise family's column tiles
(opfuse/backends/c/pointwise.py; on ``conv_lanes`` the same nest over channels, ``channel_tiles``:
the plan's ``ocb`` channels x ``tile`` columns) over a line buffer (linebuffer.py), the nest a
float member's conv is written with (convrows.py): per
output row, the KH input rows of every channel are copied once, split into column phases and
padded with the input's zero point (a row outside the input too: TFLite's padding value), so each
tap of a tile reads a constant offset with no bounds test. A padded tap then adds ``z_x w``, which
the bias has subtracted with every other tap's (``pointwise.folded_bias``): the sums are TFLite's
``sum (x - z_x) w`` over the taps inside the input. Arithmetic, requantization, chain and store
are ``Int8Sums``' and the pointwise conv's (int8/pointwise.py).

The input rows come through a ``RowSource``: the whole NCHW tensor (layer by layer, image ``n``)
or a cascade member's ring (``n`` None: row ``y`` in slot ``y % R``, int8/cascade.py). A member's
1x1 stride-1 unpadded conv reads its ring rows in place (no line buffer). A line buffer that would
exceed ``LINE_BYTES`` covers a *band* of the row's output columns at a time (``band``: the widest
that keeps it under, at least ``MIN_BAND`` columns), every input channel's reach of it copied,
the band's bounds inside the input found at run time; each band's tiles sum over every input
channel, so no partial sums are kept across it.

A graph input's NHWC rows read in place (a TFLite model's stem, ``RowSource.nhwc``): a stem of at
most ``linebuffer.GATHER_CHANNELS`` channels gathers its line buffer pixel by pixel, phase by
phase at a stride (each pixel's channels read at once into each channel's run), one input channel
a term (pairs of channels, ``pairs_fit_int16``, ran its 3 channels 1.2-1.5x slower); a wider one
copies it channel by channel over the pixels' stride. These replaced a nest of their own (row
taps reading the NHWC pixels in place). Measured on stems of the shared models' geometry alone
(one-conv .tflite files, benchmarks/c_revisions.py, -march=x86-64-v2, medians of 41, row taps /
tiles): pretrainedResnet_quant's 3x3 stride 1 over 3 channels 1.08x; mcunet_vww's stride 2 0.94x
and vww_96_int8's 0.97x; the whole models at x86-64-v2 (the x86 module's ``#else``, the only C
that ran the row taps) 0.99x and 1.00x, outputs identical.

``conv_lanes`` had a nest of its own too (int8/conv.py's and int8/cascade.py's: per output pixel,
the valid taps of the window, a vector over every channel of the group summed in memory); as
channel tiles (int8 x86-64-v2, c_revisions medians of 21 against it): kws_ref_model 1.01x,
pretrainedResnet_quant 1.20x, vww_96_int8 1.10x, mcunet_vww 1.05x, person_detect 1.12x."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.pointwise import Int8Sums, emit_tiles, store_tile, tile_sums
from opfuse.backends.c.linebuffer import fill_rows, tap_offsets
from opfuse.backends.c.pointwise import ColumnTile, chunks, open_channels
from opfuse.backends.c.rowsource import RowSource, member_row
from opfuse.kernelplan.conv8 import PIX_TILE, ConvGeom, ConvPlan
from opfuse.kernelplan.convf import line_width

LINE_BYTES = 32 * 1024  # the line buffer on the stack, at most (else a band of the row's columns)
MIN_BAND = 8  # output columns of a band at least (a conv over thousands of input channels)


def line_bytes(g: ConvGeom, columns: int | None = None) -> int:
    """Bytes of the line buffer of ``columns`` output columns (the whole row): the float one's
    element count (kernelplan/convf.py)."""
    return g.c * g.k[0] * g.s[1] * line_width(g, g.ow if columns is None else columns)


def band(g: ConvGeom) -> int:
    """Output columns of the row a line buffer covers: all of them where it stays under
    ``LINE_BYTES``, else bands as even as the widest that does allows (at least ``MIN_BAND``
    columns)."""
    if line_bytes(g) <= LINE_BYTES:
        return g.ow
    widest = max(MIN_BAND, LINE_BYTES // (g.c * g.k[0] * g.s[1]) - line_width(g, 0))
    return -(-g.ow // -(-g.ow // widest))  # bands of one width, the row split evenly


def row_tile8(w: CWriter, g: ConvGeom, zx: int, plan: ConvPlan, src: RowSource, n: str | None,
              wt: str, b: str, sums: Int8Sums, columns: int, r: str = "r",
              b0: str | None = None) -> ColumnTile:
    """The line buffer of ``columns`` output columns of output row ``r`` (from column ``b0``, a
    band, or the whole row) of image ``n`` (None: a member's ring) and the tile of ``plan.ocb``
    channels that reads it (on the ``conv_lanes`` path a channel tile of ``plan.tile`` columns) (weights ``wt`` packed ``[OC/ocb][ICg][KH][KW][ocb]``,
    ``conv.packed_weights``; ``b`` the bias with z_x folded in over every tap); a member's 1x1
    stride-1 unpadded conv reads its ring rows in place."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl) = g.k, g.s, g.d, g.p
    if n is None:
        def row(at: str) -> str:
            return member_row(src.base, "ci", at, src.rows, src.width)
    else:
        def row(at: str) -> str:
            return f"{src.channel(n, 'ci')} + {at}*{src.width}"
    width = plan.tile if plan.path == "conv_lanes" else min(columns, PIX_TILE)
    tile = dict(wp=wt, bp=b, group=g.group, icg=g.icg, ocg=g.ocg, lanes=plan.ocb,
                columns=columns, width=width, arith=sums)
    if n is None and kh * kw == 1 and (sh, sw) == (1, 1) and (pt, pl) == (0, 0):
        w(f"const int xs = {src.slot(r)};")
        return ColumnTile(taps=(0,), row=row("xs"), **tile)
    lw = line_width(g, columns)
    per_ci = kh * sw * lw
    fill_rows(w, channels=g.c, kh=kh, per_ci=per_ci, sw=sw, lw=lw, pl=pl, w_in=g.iw,
              h_in=g.ih, first_row=lambda ky: f"{r}*{sh} - {pt} + {ky * dh}", slot=src.slot,
              row=lambda ky: row(f"sl{ky}"), pixel=src.pixel, ctype=sums.in_type, pad=str(zx),
              shift=None if b0 is None else f"{b0}*{sw}" if sw > 1 else b0, gather=True)
    return ColumnTile(taps=tap_offsets(kh, kw, sw, dw, lw), row=f"line + ci*{per_ci}", **tile)


def emit_banded(w: CWriter, g: ConvGeom, tile: Callable[[int, str | None], None]) -> None:
    """``tile(columns, b0)`` for the whole row (``b0`` None) or for each of its bands
    (``band``): a loop over the bands of one width, then the narrower last one."""
    width = band(g)
    if width >= g.ow:
        tile(g.ow, None)
        return
    for count, cols, start in chunks(g.ow, width, False):
        w.open(f"for (int b0 = {start}; b0 < {start + count * cols}; b0 += {cols})")
        tile(cols, "b0")
        w.close()


def emit_row_tiles8(w: CWriter, g: ConvGeom, zx: int, plan: ConvPlan, src: RowSource, wt: str,
                    b: str, sums: Int8Sums, chain: Chain8 | None, rank: int, y: str) -> None:
    """Every output row of every image of the NCHW input ``src`` (``row_tile8``'s tiles, whole
    rows or bands of them), into the NCHW output ``y`` through ``chain``."""
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int r = 0; r < {g.oh}; ++r)")

    def tile(columns: int, b0: str | None) -> None:
        tl = row_tile8(w, g, zx, plan, src, "n", wt, b, sums, columns, b0=b0)
        emit_tiles(w, plan, tl, lambda width: store_tile(w, tl, g, sums, chain, rank, y, width,
                                                         "r", b0 or "", tile_sums(plan)))

    emit_banded(w, g, tile)
    w.close()
    w.close()


def emit_member_rows8(w: CWriter, g: ConvGeom, zx: int, plan: ConvPlan, src: RowSource, wt: str,
                      b: str, sums: Int8Sums, out_row: str, store: Callable[[str], None]) -> None:
    """Output row ``r`` of a cascade member (the caller's loop) from its ring ``src``: the
    tiles of ``emit_row_tiles8``; ``out_row`` declares channel ``c``'s output row ``yr``,
    ``store(col)`` writes its integer ``v`` at column ``col`` (int8/cascade.py: the member's
    epilogue, into its ring)."""
    def tile(columns: int, b0: str | None) -> None:
        tl = row_tile8(w, g, zx, plan, src, None, wt, b, sums, columns, b0=b0)

        def finish(width: int) -> None:
            open_channels(w, tl)
            w(out_row)
            w.open(f"for (int t = 0; t < {width}; ++t)")
            w(f"const int i = {b0 + ' + ' if b0 else ''}i0 + t;")
            sums.finish(w, tile_sums(plan))
            store("i")
            w.close()
            w.close()

        emit_tiles(w, plan, tl, finish)

    emit_banded(w, g, tile)
