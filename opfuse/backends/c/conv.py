"""Conv kernels (general, grouped, depthwise, 1x1), optionally ending in a pool, epilogue fused:
the dispatcher of the float conv nests (kernelplan/convf.py chooses among them).

Layout NCHW (1-D convs are 2-D with height 1). Constant weights are repacked at compile time
(``convdirect.pack_weights``: ``[group][block][ICg][KH][KW][lanes]``) so the weights a tile uses
together are adjacent; the epilogue chain is applied to a tile's sums before the single store.

Dispatch with constant weights (the fast paths): depthwise -> dwconv.py; a scalar FPU's pointwise
conv or stem, or a vector unit's stem -> pixeltiles.py; 1x1 stride 1 unpadded over >=
convf.PIXELS_1X1 pixels -> pointwise.py's column tiles over the flat plane (the cascade members'
nest); every other conv -> convdirect.py (register tile of output pixels x output channels,
vectorized over channels). An ISA with its own float convs (``IsaKernels.conv_float``) is offered
the conv first.

Weights that are a runtime input (read in ONNX's ``[OC][ICg][KH][KW]``): a 1x1 stride-1 unpadded
conv of one group -> pointwise.py's column tiles over the flat plane; any other conv ->
convrows.py's rows as column tiles over a line buffer (the nest of a cascade's spatial members).
A conv ending in a pool (``anchor_pool`` targets) -> convrows.py too: the conv rows a pooled row
needs as column tiles, their pre-pool epilogue applied, pooled; only the pooled row is stored.
"""

from __future__ import annotations

from dataclasses import replace

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims, offset_expr, pick_block, who
from opfuse.backends.c.convdirect import emit_direct, pack_weights
from opfuse.backends.c.convrows import emit_conv_pool, emit_rows
from opfuse.backends.c.dwconv import emit_depthwise, isa_rows, zero_row
from opfuse.backends.c.epilogue import Chain, Operand, build_chain, emit_apply
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.pixeltiles import emit_pixel_conv
from opfuse.backends.c.pointwise import ColumnTile, column_tiles, open_channels
from opfuse.backends.c.pools import pads_for, pool_geom
from opfuse.backends.c.rowsource import RowSource
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.kernelplan import convf
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.targets.isa import Isa

# floats of input a run of pointwise tiles reads per channel block (with the ISA's register
# tile): 256 KB, which stay in a 1 MB L2 beside the output and residual rows the run streams
# (docs/isa.md)
X_BLOCK = 65536
LINE = 16  # floats a cache line (64 bytes): the look-ahead prefetch's step


def conv_geom(node: ir.Node) -> ConvGeom:
    xs = dims(node.inputs[0], node)
    ws = dims(node.inputs[1], node)
    ys = dims(node.outputs[0], node)
    if len(xs) not in (3, 4):
        raise OpfuseError(f"C backend: {who(node)}: only 1-D and 2-D convolutions are emitted")
    nsp = len(xs) - 2
    ks = list(attr(node, "kernel_shape") or ws[2:])
    ss = list(attr(node, "strides") or [1] * nsp)
    ds = list(attr(node, "dilations") or [1] * nsp)
    pb, _ = pads_for(node, list(xs[2:]), list(ys[2:]), ks, ss, ds)
    if nsp == 1:
        xs, ys = (xs[0], xs[1], 1, xs[2]), (ys[0], ys[1], 1, ys[2])
        ks, ss, ds, pb = [1, *ks], [1, *ss], [1, *ds], [0, *pb]
    group = int(attr(node, "group", 1))
    # the kernels index the weight by these attributes: they must describe it (a corrupt model's
    # kernel_shape or group otherwise reshapes the weight into nonsense)
    if group < 1 or xs[1] % group or ys[1] % group or \
            tuple(ws) != (ys[1], xs[1] // group, *ks[-nsp:]):
        raise OpfuseError(
            f"C backend: {who(node)}: weight shape {list(ws)} does not match kernel_shape "
            f"{ks[-nsp:]}, group {group}, {xs[1]} input and {ys[1]} output channels"
        )
    return ConvGeom(xs[0], xs[1], xs[2], xs[3], ys[1], ys[2], ys[3], group, tuple(ks),
                    tuple(ss), tuple(ds), tuple(pb))


def _four(chain: Chain, shape: tuple[int, ...]) -> Chain:
    if len(shape) == 4:
        return chain
    from opfuse.backends.c.epilogue import Operand

    ops = [Operand(o.ptr, (o.strides[0], o.strides[1], 0, o.strides[2])) for o in chain.operands]
    return Chain((shape[0], shape[1], 1, shape[2]), chain.steps, ops)


def emit_conv(
    w: CWriter,
    node: ir.Node,
    pre: list[ir.Node],
    pool: ir.Node | None,
    post: list[ir.Node],
    params: Params,
) -> None:
    g = conv_geom(node)
    shape = dims(node.outputs[0], node)
    x = params.inp(node.inputs[0], node)
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    runtime = const(node.inputs[1]) is None
    pointwise = g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0) and g.group == 1
    rows = pool is not None or (runtime and not pointwise)  # convrows.py, its own bias
    b = params.inp(bias, node) if bias is not None and not rows else None
    chain = _four(build_chain(pre, shape, params, node.outputs[0].name), shape)
    src = RowSource.of(x, g.c, g.ih, g.iw)
    if pool is not None:  # the conv rows a pooled row reads, as column tiles, then the pool
        pshape = dims(pool.outputs[0], pool)
        post_chain = _four(build_chain(post, pshape, params, pool.outputs[0].name), pshape)
        y = params.out((post or [pool])[-1].outputs[0], node)
        packed = not runtime and (bias is None or const(bias) is not None)
        emit_conv_pool(w, node, g, convf.plan_rows(g, packed), src, chain,
                       pool_geom(pool, shape, pshape), post_chain, y, params)
        return
    y = params.out((pre or [node])[-1].outputs[0], node)
    dst = RowSource.of(y, g.oc, g.oh, g.ow)
    if not runtime:
        conv_float = kernels(params.store.isa).conv_float  # the ISA's, the C below in its #else
        if conv_float is None or not conv_float(
                w, node, g, pre, params, src, dst, None,
                lambda w: _constant_weights(w, node, g, x, b, chain, y, params)):
            _constant_weights(w, node, g, x, b, chain, y, params)
        return
    flat = chain.view([[0], [1], [2, 3]])
    if pointwise and flat is not None:  # the plane as one row, ONNX's [OC][IC] weights
        plan = convf.FloatConvPlan("columns", pick_block(g.ocg), columns=convf.POINTWISE_COLUMNS)
        _pointwise(w, g, plan, x, (params.inp(node.inputs[1], node), False), b, chain, flat, y)
        return
    # runtime weights (or a chain that cannot flatten the plane): the rows as column tiles
    # over a line buffer (convrows.py)
    emit_rows(w, node, g, convf.plan_rows(g, False), src, dst, chain, params)


def nhwc_fits(node: ir.Node, isa: Isa) -> bool:
    """Whether the conv runs as pixel tiles (pixeltiles.py), the float path that reads an NHWC
    input in place (a TFLite graph input's Transpose, fusion/views.py)."""
    g = conv_geom(node)
    return (const(node.inputs[1]) is not None
            and convf.plan_convf(g, isa.scalar).path == "pixels")


def emit_conv_view(w: CWriter, view: ir.Node, node: ir.Node, pre: list[ir.Node],
                   params: Params) -> None:
    """The conv reading a graph input's NHWC -> NCHW Transpose ``view`` in place: pixel tiles
    with NHWC row addressing, the epilogue chain as ``emit_conv``'s; no ISA kernel."""
    if not nhwc_fits(node, params.store.isa):
        raise OpfuseError(f"C backend: {who(node)}: this conv does not read an NHWC input in place")
    g = conv_geom(node)
    shape = dims(node.outputs[0], node)
    x = params.inp(view.inputs[0], view)
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    b = params.inp(bias, node) if bias is not None else None
    chain = _four(build_chain(pre, shape, params, node.outputs[0].name), shape)
    y = params.out((pre or [node])[-1].outputs[0], node)
    plan = convf.plan_convf(g, params.store.isa.scalar)
    emit_pixel_conv(w, node, g, plan, RowSource.nhwc(x, g.c, g.ih, g.iw),
                    RowSource.of(y, g.oc, g.oh, g.ow), None, params, chain=chain, bias=b)


def _constant_weights(w: CWriter, node: ir.Node, g: ConvGeom, x: str, b: str | None,
                      chain: Chain, y: str, params: Params) -> None:
    """A conv with constant weights by its plan (kernelplan/convf.py): depthwise; pixel tiles
    (pixeltiles.py, the cascade members' nest: a scalar FPU's pointwise convs and stems, a vector
    unit's stems); column tiles (pointwise.py, the members' nest too: a vector unit's pointwise
    conv over a large plane, which a chain that cannot flatten the plane leaves to the direct
    conv); else the register-tiled direct conv (the ISA's FMA tile where it has one)."""
    arr = const(node.inputs[1])
    isa = kernels(params.store.isa)
    plan = convf.plan_convf(g, params.store.isa.scalar)
    if plan.path == "depthwise":
        emit_depthwise(w, g, x, params.inp(node.inputs[1], node), b, chain, y,
                       zero_row(params, g), isa_rows(params, g))
        return
    if plan.path == "pixels":
        emit_pixel_conv(w, node, g, plan, RowSource.of(x, g.c, g.ih, g.iw),
                        RowSource.of(y, g.oc, g.oh, g.ow), None, params, chain=chain, bias=b)
        return
    flat = chain.view([[0], [1], [2, 3]])
    if plan.path == "columns" and flat is not None:  # the plane as one row of column tiles
        blocks = [(j * plan.lanes, plan.lanes, plan.lanes) for j in range(g.ocg // plan.lanes)]
        wp = params.weight(f"{node.inputs[1].name}:ocb{plan.lanes}",
                           pack_weights(arr.reshape(g.oc, g.icg, *g.k), g.group, blocks)[0])
        _pointwise(w, g, plan, x, (wp, True), b, chain, flat, y, isa.fma_tile)
        return
    packed, meta = pack_weights(arr.reshape(g.oc, g.icg, g.k[0], g.k[1]), g.group)
    wp = params.weight(f"{node.inputs[1].name}:direct", packed)
    if (isa.fma_tile is not None and g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0)
            and flat is not None and g.ow < 16):
        # one flat row of H*W pixels: the register tiles span output rows (a 3x3 plane is
        # tiles of 8 + 1 pixels, not three of 3)
        g = replace(g, ih=1, iw=g.ih * g.iw, oh=1, ow=g.oh * g.ow)
        chain = Chain((g.n, g.oc, 1, g.ow), chain.steps,
                      [Operand(o.ptr, (f[0], f[1], 0, f[2]))
                       for o, f in zip(chain.operands, flat, strict=True)])
    emit_direct(w, g, x, wp, meta, b, chain, y, isa.tile_transpose, isa.fma_tile)


def _pointwise(w: CWriter, g: ConvGeom, plan: convf.FloatConvPlan, x: str,
               weights: tuple[str, bool], b: str | None, chain: Chain, flat, y: str,  # noqa: ANN001
               fma=None) -> None:  # noqa: ANN001
    """A 1x1 stride-1 unpadded conv of one group as pointwise.py's column tiles over each
    image's ``H*W`` plane read as one row (``plan``'s ``lanes`` channels x ``columns``), the
    chain on each tile's channels along its columns; ``weights``: the pointer, and whether it is
    packed (else ONNX's ``[OC][IC]``, ``lanes`` dividing the channels); with the ISA's register
    tile, runs of tiles reading ``X_BLOCK`` floats of input per channel block, each tile first
    prefetching the lines of the next tile's full-size operands (``_ahead``)."""
    p = g.oh * g.ow
    block = 0 if fma is None else X_BLOCK
    src, dst = RowSource.of(x, g.c, 1, p), RowSource.of(y, g.oc, 1, p)
    tile = ColumnTile(taps=(0,), row=src.channel("n", "ci"), wp=weights[0], bp=b, group=g.group,
                      icg=g.icg, ocg=g.ocg, lanes=plan.lanes, columns=p, width=plan.columns,
                      packed=weights[1], block=block)

    def finish(width: int) -> None:
        open_channels(w, tile)
        emit_apply(w, chain, flat, ["n", "c", "i0"], width, lambda i: f"acc[o][{i}]",
                   lambda i: f"({dst.channel('n', 'c')})[i0 + {i}]")
        w.close()

    # the full-size operands (a residual), prefetched a tile ahead where they outgrow L2
    rows = [f"({o.ptr} + {offset_expr(['n', 'c', '0'], vs)})"
            for o, vs in zip(chain.operands, flat, strict=True) if vs[-1] == 1]
    far = fma is not None and bool(rows) and g.oc * p > X_BLOCK
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    column_tiles(w, tile, finish, fma, (lambda width: _ahead(w, tile, width, rows)) if far else None)
    w.close()


def _ahead(w: CWriter, tl: ColumnTile, width: int, rows: list[str]) -> None:
    """Prefetch the lines of the next tile's columns in ``rows`` (C pointers to channel ``c``'s
    row of a full-size operand: a residual) for every channel of the block, while this tile sums:
    the epilogue's loads then find their lines in cache (the residual Add's operand cost
    light_resnet50's 64 -> 256 expands 0.3-0.5 ms of 1.4 without it, Zen 4; prefetching the
    output's lines for writing too made its 512 -> 128 reduces 1.6x slower). Only for an
    operand of more than ``X_BLOCK`` floats: a smaller one stays in L2, and the prefetch cost
    mobilenet_v2_128_0.5's 80 -> 16 projection on a 32 x 32 plane (every row at the same 4 KB
    phase) 23 -> 44 us. The last tile prefetches its own columns (the pointers stay in the
    row)."""
    w.open(f"for (int o = 0; o < {tl.lanes}; ++o)")
    w(f"const int c = grp*{tl.ocg} + ob*{tl.lanes} + o;")
    w(f"const int i1 = i0 + {width} < {tl.columns} ? i0 + {width} : i0;")
    for row in rows:
        for k in range(0, width, LINE):
            w(f"__builtin_prefetch({row} + i1{f' + {k}' if k else ''}, 0, 3);")
    w.close()
