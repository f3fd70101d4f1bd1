"""Row kernels of a cascaded C member (float32) on a vector unit: one output row of a Conv, its
epilogue fused (the ``columns`` and ``channels`` paths of kernelplan/convf.py; a scalar FPU's
members are pixel tiles, pixeltiles.py, the layer-by-layer nest).

``cascade.py`` dispatches a member here; the rows it writes are ``r = a .. b`` of one step. A
value is addressed ``(c*R + row % R)*W + column`` (``R`` rows kept, see ``cascade.py``). The
epilogue arrives as C statements on a scalar ``v`` that may read the channel ``c``, the row
``r`` and the column ``i`` (``cascade.scalar_epilogue``); it runs in the store loop, so every
value is written once, already final.

* **Depthwise** (one input and one output channel per group): the layer-by-layer band core,
  ``dwconv.emit_depthwise_rows``, through ``rowsource.py``.
* **Any other conv** (1x1 included): convrows.py's row nest, pointwise.py's *column tiles* (the
  layer-by-layer nest of a pointwise conv, of a conv with runtime weights and of a conv ending in
  a pool) of ``lanes`` output channels x ``columns`` columns of the row, accumulated over input
  channels and taps, the inputs one contiguous vector and each weight a broadcast (packed
  ``[block][ICg][KH][KW][lanes]``, zero-padded), the ISA's register tile where it has one; a
  1x1 stride-1 unpadded conv reads the ring rows directly, any other conv a line buffer of the
  KH rows of every input channel (convrows.py). A 1x1 conv on rows narrower than
  ``convf.NARROW`` (7 or 14 columns, where a vector over columns is mostly empty): a *channel
  tile*, the same reduction vectorized over ``lanes`` channels x ``columns`` columns, its
  epilogue applied on the tile (with 9 taps the channel tile ran at 5 GF/s, so spatial kernels
  keep column tiles). A conv whose line buffer would exceed ``convf.LINE_FLOATS`` runs the
  layer-by-layer direct core (``convdirect.emit_direct_rows``) instead.

Tile sizes (kernelplan/convf.py) were measured on AVX-512 (Zen 4) and AVX2 builds
(``-march=x86-64-v3``) of the portable C: 4 x 24 (1x1) and 16 x 4 (narrow) keep their sums in
AVX2's 16 registers; spatial kernels keep 8 x 16; under x86's register tile a 1x1 member takes
8 x 16. Nothing here names a vector extension.
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.convrows import row_tile, tile_weights
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.pointwise import (
    ColumnTile,
    channel_tiles,
    column_tiles,
    open_blocks,
    open_channels,
)
from opfuse.backends.c.rowsource import RowSource, ring_slot
from opfuse.backends.c.tensors import Params
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.kernelplan.convf import FloatConvPlan


def store_row(w: CWriter, yp: str, ry: int, w_out: int, epilogue: list[str]) -> None:
    """The epilogue, then ``v`` stored at column ``i`` of output row ``ys`` of channel ``c``."""
    for line in epilogue:
        w(line)
    w(f"{yp}[(c*{ry} + ys)*{w_out} + i] = v;")


def emit_tiled(w: CWriter, node: ir.Node, g: ConvGeom, plan: FloatConvPlan, src: RowSource,
               dst: RowSource, epilogue: list[str], params: Params) -> None:
    """Rows ``a .. b`` of a conv as register tiles (see the module docstring), ``plan``'s
    ``columns`` (convrows.py's row nest, its line buffer) or ``channels``."""
    weights = tile_weights(node, g, plan.lanes, params)
    yp, ry, w_out = dst.base, dst.rows, g.ow
    w.open("for (int r = a; r <= b; ++r)")
    w(f"const int ys = {ring_slot('r', ry)}, xs = {ring_slot('r', src.rows)};")
    w("(void)xs;")
    tile = row_tile(w, g, plan, src, None, weights, params)
    if plan.path == "columns":
        def finish(width: int) -> None:
            open_channels(w, tile)
            w.open(f"for (int t = 0; t < {min(width, w_out)}; ++t)")
            w("const int i = i0 + t;")
            w("float v = acc[o][t];")
            store_row(w, yp, ry, w_out, epilogue)
            w.close()
            w.close()

        column_tiles(w, tile, finish, kernels(params.store.isa).fma_tile)
    else:
        _channel_tiles(w, tile, epilogue, yp, ry, kernels(params.store.isa).fma_tile)
    w.close()


def _channel_tiles(w: CWriter, tl: ColumnTile, epilogue: list[str], yp: str, ry: int,
                   fma=None) -> None:  # noqa: ANN001
    """``lanes`` channels x ``width`` columns, vectorized over channels (rows narrower than NARROW: a
    vector over 7 or 14 columns would be mostly empty). The epilogue runs on the tile, over
    channels (vectorized, no short compare-and-branch loop over 7 columns), on its way into the
    row buffer ``accb[lanes][W]``; the rows are then copied out. An epilogue that reads a residual
    row (a gather over channels) runs along the rows instead, in the copy. The reduction is the
    column tiles' (``pointwise.reduce_tile``) over the channels, under the ISA's register tile
    ``fma`` where it has one (x86: a chain of 14-column rows cascaded with no minimum row width,
    two 96 -> 32 -> 96 blocks, 1.05x). The tiles are pointwise.py's nest over channels
    (``channel_tiles``); this function stages their rows."""
    ocv, w_out = tl.lanes, tl.columns
    rowwise = any("+ i]" in line for line in epilogue)
    last = tl.ocg - (tl.blocks - 1) * ocv
    count = (str(last) if last == ocv or tl.blocks == 1
             else f"(ob == {tl.blocks - 1} ? {last} : {ocv})")
    open_blocks(w, tl)
    w(f"float accb[{ocv}][{w_out}];")

    def finish(width: int) -> None:  # the tile's sums s[t][o] into the row buffer
        # channels outside: over t inside, gcc 12 -O3 warned (-Werror) that s may be read
        # uninitialized where count < lanes, in the portable C (x86-64, x86-64-v2)
        w.open(f"for (int o = 0; o < {count}; ++o) for (int t = 0; t < {width}; ++t)")
        w("float v = s[t][o];")
        if not rowwise:
            w(f"const int c = grp*{tl.ocg} + ob*{ocv} + o;")
            w("(void)c;")
            for line in epilogue:
                w(line)
        w("accb[o][i0 + t] = v;")
        w.close()

    channel_tiles(w, tl, finish, fma)
    open_channels(w, tl)
    w.open(f"for (int i = 0; i < {w_out}; ++i)")
    w("float v = accb[o][i];")
    for line in epilogue if rowwise else ():
        w(line)
    w(f"{yp}[(c*{ry} + ys)*{w_out} + i] = v;")
    w.close()
    w.close()
    w.close()
