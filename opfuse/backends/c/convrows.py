"""Rows of a float conv as column tiles over a line buffer, its input read through a
``RowSource``: the one row nest of a spatial conv on a vector unit's cascade member, of a conv
whose weights are a runtime input, and of a conv that ends in a pool (``anchor_pool`` targets).

Output row ``r`` (the caller's loop variable) is pointwise.py's *column tiles* of ``lanes`` output
channels x ``columns`` columns over a line buffer: the KH input rows of every channel the row
reads, zero-padded and split into column phases (linebuffer.py), so a tile reads each tap at a
constant offset with no bounds test. A 1x1 stride-1 unpadded conv reads its input rows in place,
and so does, layer by layer, an unpadded conv of stride 1 across whose rows are all inside the
input (conv_bn_relu_maxpool_test.onnx's 5x5 conv on cortex-m4: 426,718 -> 390,118 instructions).
A row narrower than a vector (``VEC``) computes ``VEC`` columns (the extra ones read the buffer's
zero tail) and stores its own; a 7-column tile compiled ~10x slower per MAC.

The input is a whole NCHW tensor (image ``n``) or a cascade member's ring (``n`` None: row
``y`` in slot ``y % R``, which is ``y`` where the value is kept whole). The weights are packed
``[group][block][ICg][KH][KW][lanes]`` by the direct core's packer (``convdirect.pack_weights``,
a block's last channels zero-padded, the bias too), or, when they are a runtime input, read in
ONNX's ``[OC][ICg][KH][KW]`` (``ColumnTile.packed`` False; ``lanes`` then divides the group's
channels, kernelplan/convf.py ``plan_rows``).

Callers: ``cascade_rows.emit_tiled`` (a member's rows ``a .. b``, its scalar epilogue stored
into the ring), ``emit_rows`` (every row of a whole tensor, the epilogue chain along each
tile's columns) and ``emit_conv_pool`` (each conv row a pooled window needs computed once, its
chain applied, into a ring of every channel's rows, pooled by ``pools.emit_pool_row``, the
pool's chain on the pooled row). A scalar FPU takes these tiles too (its sums in memory): with
weights that are a runtime input they ran 0.50-0.69x the old row accumulation's instructions
on cortex-m4 and 0.99x on a 1-channel 5x5 conv (docs/measurements.md), so the plan keeps no
other nest for it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, contiguous, offset_expr
from opfuse.backends.c.convdirect import pack_weights
from opfuse.backends.c.epilogue import Chain, emit_apply
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.linebuffer import fill_rows, tap_offsets
from opfuse.backends.c.pointwise import ColumnTile, column_tiles, open_channels
from opfuse.backends.c.pools import PoolGeom, emit_pool_row
from opfuse.backends.c.rowsource import RowSource, member_row, ring_slot
from opfuse.backends.c.tensors import Params
from opfuse.ir.values import const
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.kernelplan.convf import FloatConvPlan, line_width

VEC = 8  # one vector of columns (one AVX2 vector, two NEON ones)


def tile_weights(node: ir.Node, g: ConvGeom, lanes: int,
                 params: Params) -> tuple[str, str | None, bool]:
    """The weight and bias pointers of ``lanes``-channel tiles, and whether the weights are
    packed: constants packed (the bias zero-padded alike), a runtime input read as it is."""
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] is not None else None
    weight = const(node.inputs[1])
    if weight is None:  # ONNX's layout: lanes divides the group's channels
        return (params.inp(node.inputs[1], node),
                params.inp(bias, node) if bias is not None else None, False)
    blocks = -(-g.ocg // lanes)
    blocks_of = [(b * lanes, min(lanes, g.ocg - b * lanes), lanes) for b in range(blocks)]
    weight = np.asarray(weight, np.float32).reshape(g.oc, g.icg, *g.k)
    packed, _ = pack_weights(weight, g.group, blocks_of)  # the direct core's packer and layout
    wp = params.weight(f"{node.inputs[1].name}#tile{lanes}", packed)
    bp = None
    if bias is not None and const(bias) is not None:
        padded = np.zeros((g.group, blocks * lanes), np.float32)
        padded[:, :g.ocg] = np.asarray(const(bias), np.float32).reshape(g.group, g.ocg)
        bp = params.weight(f"{bias.name}#tile{lanes}", padded.ravel())
    elif bias is not None:  # a runtime bias beside constant weights: read where lanes divide
        assert g.ocg % lanes == 0, "plan_rows gives lanes dividing the channels here"
        bp = params.inp(bias, node)
    return wp, bp, True


def row_tile(w: CWriter, g: ConvGeom, plan: FloatConvPlan, src: RowSource, n: str | None,
             weights: tuple[str, str | None, bool], params: Params, r: str = "r") -> ColumnTile:
    """The line buffer of output row ``r`` of image ``n`` (None: a cascade member's ring), and
    the column tile that reads it (module docstring)."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl) = g.k, g.s, g.d, g.p
    direct = kh * kw == 1 and (sh, sw) == (1, 1) and (pt, pl) == (0, 0)
    cols = VEC if plan.path == "columns" and not direct and g.ow < VEC else g.ow
    lw = line_width(g, cols)
    per_ci = kh * sw * lw
    if n is None:  # a member: the slot y % R (y where kept whole), then the ring's row pointer
        def slot(y: str) -> str:
            return ring_slot(y, src.rows)

        def row(c: str, at: str) -> str:
            return member_row(src.base, c, at, src.rows, src.width)
    else:  # a whole tensor: the slot is the row's offset in its channel
        slot = src.row

        def row(c: str, at: str) -> str:
            return f"{src.channel(n, c)} + {at}"
    # an unpadded stride-1-across conv of a whole tensor whose every row is inside the input:
    # its rows read in place, each tap at a constant offset (no line buffer to copy)
    in_place = (n is not None and not direct and sw == 1 and (pt, pl) == (0, 0) and g.ow >= VEC
                and g.ow + (kw - 1) * dw == g.iw and (g.oh - 1) * sh + (kh - 1) * dh < g.ih)
    if in_place:
        w(f"const int xs = {slot(f'{r}*{sh}' if sh > 1 else r)};")
        taps = tuple(ky * dh * g.iw + kx * dw for ky in range(kh) for kx in range(kw))
    else:
        taps = tap_offsets(kh, kw, sw, dw, lw)
    if not direct and not in_place:
        fill_rows(w, channels=g.c, kh=kh, per_ci=per_ci, sw=sw, lw=lw, pl=pl, w_in=g.iw,
                  h_in=g.ih, first_row=lambda ky: f"{r}*{sh} - {pt} + {ky * dh}", slot=slot,
                  row=lambda ky: row("ci", f"sl{ky}"))
    elif direct and n is not None:
        w(f"const int xs = {slot(r)};")
    wp, bp, packed = weights
    return ColumnTile(
        taps=taps, row=row("ci", "xs") if direct or in_place else f"line + ci*{per_ci}",
        wp=wp, bp=bp, group=g.group, icg=g.icg, ocg=g.ocg, lanes=plan.lanes, columns=cols,
        width=plan.columns, packed=packed, overlap=params.restrict != "" and kh * kw > 1,
    )  # fmt: skip


def emit_rows(w: CWriter, node: ir.Node, g: ConvGeom, plan: FloatConvPlan, src: RowSource,
              dst: RowSource, chain: Chain, params: Params) -> None:
    """Every row of every image of ``node``'s output, ``chain`` applied along each tile's
    columns (its operands' strides on the 4-D output) before the store into ``dst``."""
    weights = tile_weights(node, g, plan.lanes, params)
    vs = [o.strides for o in chain.operands]
    w.open(f"for (int n = 0; n < {g.n}; ++n) for (int r = 0; r < {g.oh}; ++r)")
    w(f"const int yrow = {dst.row('r')};")
    tile = row_tile(w, g, plan, src, "n", weights, params)

    def finish(width: int) -> None:
        open_channels(w, tile)
        emit_apply(w, chain, vs, ["n", "c", "r", "i0"], min(width, g.ow), lambda i: f"acc[o][{i}]",
                   lambda i: f"({dst.channel('n', 'c')})[yrow + i0 + {i}]")
        w.close()

    column_tiles(w, tile, finish, kernels(params.store.isa).fma_tile)
    w.close()


def emit_conv_pool(w: CWriter, node: ir.Node, g: ConvGeom, plan: FloatConvPlan, src: RowSource,
                   chain: Chain, pg: PoolGeom, post: Chain, y: str, params: Params) -> None:
    """``node`` then a pool: per pooled row, each conv row its window reads that no earlier
    window computed, as column tiles of every channel, ``chain`` applied on the way into a ring
    of conv rows ``crows[R][C][W]`` (``R`` the rows a window spans); the pool of the window's
    rows (``pacc[C][PW]``), then ``post`` on each channel's pooled row, stored into ``y``. Each
    conv row is computed once (convpool_b, a 3x3/2 MaxPool: 1.5 times before the ring)."""
    weights = tile_weights(node, g, plan.lanes, params)
    vs, ps = [o.strides for o in chain.operands], [o.strides for o in post.operands]
    ys = contiguous((pg.n, pg.c, pg.oh, pg.ow))
    span = (pg.k[0] - 1) * pg.d[0] + 1
    ring = min(span, g.oh)
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w(f"float crows[{ring}][{g.oc}][{g.ow}];")
    w("int todo = 0;")  # the first conv row not computed yet
    w.open(f"for (int ph = 0; ph < {pg.oh}; ++ph)")
    w(f"const int top = ph*{pg.s[0]} - {pg.p[0]};")
    w(f"const int last = top + {span - 1} < {g.oh - 1} ? top + {span - 1} : {g.oh - 1};")
    w.open("for (todo = todo > top ? todo : top; todo <= last; ++todo)")
    w("const int r = todo;")
    tile = row_tile(w, g, plan, src, "n", weights, params)
    w(f"float (*crow)[{g.ow}] = crows[r % {ring}];")

    def finish(width: int) -> None:
        open_channels(w, tile)
        emit_apply(w, chain, vs, ["n", "c", "r", "i0"], min(width, g.ow),
                   lambda i: f"acc[o][{i}]", lambda i: f"crow[c][i0 + {i}]")
        w.close()

    column_tiles(w, tile, finish, kernels(params.store.isa).fma_tile)
    w.close()

    def load(r: str) -> str:
        w(f"float (*crow)[{g.ow}] = crows[{r} % {ring}];")
        return "crow"

    emit_pool_row(w, pg, g.oc, "pacc", "ph", load)
    w.open(f"for (int c = 0; c < {g.oc}; ++c)")
    emit_apply(w, post, ps, ["n", "c", "ph", "0"], pg.ow, lambda i: f"pacc[c][{i}]",
               lambda i: f"{y}[{offset_expr(['n', 'c', 'ph', i], ys)}]")
    w.close()
    w.close()
    w.close()
