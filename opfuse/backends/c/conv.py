"""Conv kernels (general, grouped, depthwise, 1x1), optionally ending in a pool, epilogue fused.

Layout NCHW (1-D convs are 2-D with height 1). Constant weights are repacked at compile time to
``[OC/OCB][IC/group][KH][KW][OCB]`` so the OCB weights used together are adjacent. The accumulator
is a block of OCB output channels times a run of output columns kept on the stack; the inner loop
runs over contiguous output columns (and, at stride 1, contiguous input columns), which gcc -O3
vectorizes. The epilogue chain is applied to the accumulator block before the single store.

Dispatch with constant weights (the fast paths, kernelplan/convf.py): depthwise -> dwconv.py; a
scalar FPU's pointwise conv or stem, or a vector unit's stem -> pixeltiles.py; 1x1 stride 1
unpadded over >= convf.PIXELS_1X1 pixels -> pointwise.py's column tiles over the flat plane (the
cascade members' nest); every other conv -> convdirect.py
(register tile of output pixels x output channels, vectorized over channels). The row paths
below remain for runtime (non-constant) weights and for a conv that ends in a fused pool.

* 1x1, stride 1, no padding, one group: pointwise.py's column tiles over the flattened H*W.
* otherwise: one output row at a time; per kernel column the valid output range is computed at
  compile time, so there are no bounds tests in the inner loop.
* with a pool (``anchor_pool`` targets): the conv rows a pooled row needs are computed, their
  pre-pool epilogue applied, and pooled in registers; only the pooled row is stored.
"""

from __future__ import annotations

from dataclasses import replace

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, contiguous, dims, offset_expr, pick_block, who
from opfuse.backends.c.convdirect import emit_direct, pack_weights
from opfuse.backends.c.dwconv import emit_depthwise, zero_row
from opfuse.backends.c.epilogue import Chain, Operand, build_chain, emit_apply
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.pixeltiles import emit_pixel_conv
from opfuse.backends.c.pointwise import ColumnTile, column_tiles, open_channels
from opfuse.backends.c.pools import PoolGeom, emit_pool_row, pads_for, pool_geom, window
from opfuse.backends.c.rowsource import RowSource
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.kernelplan import convf
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.targets.isa import Isa

ROW_MIN = 128  # short rows are accumulated several at a time, up to this many columns
SHORT_ROW = 32  # rows narrower than this count as short
# floats of input a block of pointwise tiles reads (with the ISA's register tile): 1 MB, an L2,
# so a plane of up to 1 MB of input runs whole per channel block (docs/isa.md)
X_BLOCK = 262144


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


class _Weights:
    """Weight indexing: packed constant blocks, or the ONNX layout for runtime weights."""

    def __init__(self, node: ir.Node, g: ConvGeom, ocb: int, params: Params) -> None:
        wv = node.inputs[1]
        arr = const(wv)
        self.ocb = ocb
        self.g = g
        self.packed = arr is not None
        if arr is not None:
            blocks = [(j * ocb, ocb, ocb) for j in range(g.ocg // ocb)]  # ocb divides ocg
            packed, _ = pack_weights(arr.reshape(g.oc, g.icg, *g.k), g.group, blocks)
            self.ptr = params.weight(f"{wv.name}:ocb{ocb}", packed)
        else:
            self.ptr = params.inp(wv, node)

    def at(self, oc0: str, j: str, ic: str, kh: str, kw: str) -> str:
        g = self.g
        if self.packed:
            return (f"{self.ptr}[(((({oc0})/{self.ocb}*{g.icg} + {ic})*{g.k[0]} + {kh})*{g.k[1]}"
                    f" + {kw})*{self.ocb} + {j}]")
        return f"{self.ptr}[((({oc0} + {j})*{g.icg} + {ic})*{g.k[0]} + {kh})*{g.k[1]} + {kw}]"


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
    ocb = pick_block(g.ocg, (8, 4, 2, 1)) if g.icg > 1 or g.ocg > 1 else 1
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    b = params.inp(bias, node) if bias is not None else None
    chain = _four(build_chain(pre, shape, params, node.outputs[0].name), shape)
    if pool is not None:
        pshape = dims(pool.outputs[0], pool)
        post_chain = _four(build_chain(post, pshape, params, pool.outputs[0].name), pshape)
        y = params.out((post or [pool])[-1].outputs[0], node)
        wts = _Weights(node, g, ocb, params)
        _conv_pool(w, g, x, wts, b, chain, pool_geom(pool, shape, pshape), post_chain, y)
        return
    y = params.out((pre or [node])[-1].outputs[0], node)
    if const(node.inputs[1]) is not None:
        conv_float = kernels(params.store.isa).conv_float  # the ISA's, the C below in its #else
        if conv_float is None or not conv_float(
                w, node, g, pre, params, RowSource.of(x, g.c, g.ih, g.iw),
                RowSource.of(y, g.oc, g.oh, g.ow), None,
                lambda w: _constant_weights(w, node, g, x, b, chain, y, params)):
            _constant_weights(w, node, g, x, b, chain, y, params)
        return
    wts = _Weights(node, g, ocb, params)
    flat = chain.view([[0], [1], [2, 3]])
    if g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0) and g.group == 1 and flat is not None:
        plan = convf.FloatConvPlan("columns", ocb, columns=convf.POINTWISE_COLUMNS)
        _pointwise(w, g, plan, x, wts, b, chain, flat, y)
        return
    if flat is not None and g.ow < SHORT_ROW:
        _row_blocks(w, g, x, wts, b, chain, flat, y)
        return
    ys = contiguous((g.n, g.oc, g.oh, g.ow))
    vs = [o.strides for o in chain.operands]
    _row_loops(w, g)
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
    _ob_loop(w, g, ocb)
    _conv_row(w, g, x, wts, b, ocb, "oh")
    w.open(f"for (int j = 0; j < {ocb}; ++j)")
    coords = ["n", "oc0 + j", "oh", "0"]
    emit_apply(w, chain, vs, coords, g.ow, lambda i: f"acc[j][{i}]",
               lambda i: f"{y}[{offset_expr(['n', 'oc0 + j', 'oh', i], ys)}]")
    w.close()
    w.close()
    w.close()
    _close_row_loops(w)


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
                       zero_row(params, g))
        return
    if plan.path == "pixels":
        emit_pixel_conv(w, node, g, plan, RowSource.of(x, g.c, g.ih, g.iw),
                        RowSource.of(y, g.oc, g.oh, g.ow), None, params, chain=chain, bias=b)
        return
    flat = chain.view([[0], [1], [2, 3]])
    if plan.path == "columns" and flat is not None:  # the plane as one row of column tiles
        _pointwise(w, g, plan, x, _Weights(node, g, plan.lanes, params), b, chain, flat, y,
                   isa.fma_tile)
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


def _row_blocks(w, g: ConvGeom, x, wts: _Weights, b, chain: Chain, flat, y) -> None:
    """Short rows: accumulate ``rb`` output rows at once so the epilogue loop is long enough to
    vectorize (a 14-wide row is unrolled into scalar code with branches otherwise)."""
    ocb = wts.ocb
    rb = max(1, min(g.oh, ROW_MIN // g.ow))
    plane = g.oh * g.ow
    _row_loops(w, g)
    for rows, count, start in ((rb, g.oh // rb, 0), (g.oh % rb, 1, g.oh - g.oh % rb)):
        if rows == 0 or count == 0:
            continue
        w.open(f"for (int t = 0; t < {count}; ++t)")
        w(f"const int oh0 = {start} + t*{rows};")
        _ob_loop(w, g, ocb)
        _init_acc(w, ocb, rows * g.ow, b)
        w.open(f"for (int r = 0; r < {rows}; ++r)")
        _accumulate(w, g, x, wts, ocb, "oh0 + r", "r*" + str(g.ow))
        w.close()
        w.open(f"for (int j = 0; j < {ocb}; ++j)")
        emit_apply(w, chain, flat, ["n", "oc0 + j", f"oh0*{g.ow}"], rows * g.ow,
                   lambda i: f"acc[j][{i}]",
                   lambda i: f"{y}[n*{g.oc * plane} + (oc0 + j)*{plane} + oh0*{g.ow} + {i}]")
        w.close()
        w.close()
        w.close()
    _close_row_loops(w)


def _row_loops(w: CWriter, g: ConvGeom) -> None:
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int grp = 0; grp < {g.group}; ++grp)")


def _ob_loop(w: CWriter, g: ConvGeom, ocb: int) -> None:
    """Output-channel blocks innermost: the input rows they share stay in cache."""
    w.open(f"for (int ob = 0; ob < {g.ocg // ocb}; ++ob)")
    w(f"const int oc0 = grp*{g.ocg} + ob*{ocb};")


def _close_row_loops(w: CWriter) -> None:
    w.close()
    w.close()


def _init_acc(w: CWriter, ocb: int, width: int, b: str | None) -> None:
    w(f"float acc[{ocb}][{width}];")
    w.open(f"for (int j = 0; j < {ocb}; ++j)")
    init = f"{b}[oc0 + j]" if b is not None else "0.0f"
    w(f"for (int i = 0; i < {width}; ++i) acc[j][i] = {init};")
    w.close()


def _conv_row(w: CWriter, g: ConvGeom, x: str, wts: _Weights, b: str | None, ocb: int, oh: str):
    """Declare ``acc[ocb][ow]`` and accumulate output row ``oh`` of channels oc0..oc0+ocb."""
    _init_acc(w, ocb, g.ow, b)
    _accumulate(w, g, x, wts, ocb, oh, "0")


def _accumulate(w: CWriter, g: ConvGeom, x: str, wts: _Weights, ocb: int, oh: str, col: str):
    """``acc[j][col + ow] += conv(row oh)`` for the block's channels."""
    at = "" if col == "0" else f"{col} + "
    w.open(f"for (int ic = 0; ic < {g.icg}; ++ic)")
    w(f"const float *xc = {x} + (n*{g.c} + grp*{g.icg} + ic)*{g.ih * g.iw};")
    w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
    w(f"const int ih = ({oh})*{g.s[0]} - {g.p[0]} + kh*{g.d[0]};")
    w(f"if (ih < 0 || ih >= {g.ih}) continue;")
    w(f"const float *xr = xc + ih*{g.iw};")
    for kw in range(g.k[1]):
        lo, hi = window(g.iw, g.ow, g.k[1], g.s[1], g.d[1], g.p[1], kw)
        if lo >= hi:
            continue
        off = kw * g.d[1] - g.p[1]
        idx = f"i*{g.s[1]} + {off}" if g.s[1] != 1 else f"i + {off}"
        w.open(f"for (int j = 0; j < {ocb}; ++j)")
        w(f"const float wv = {wts.at('oc0', 'j', 'ic', 'kh', str(kw))};")
        w(f"for (int i = {lo}; i < {hi}; ++i) acc[j][{at}i] += wv * xr[{idx}];")
        w.close()
    w.close()
    w.close()


def _pointwise(w: CWriter, g: ConvGeom, plan: convf.FloatConvPlan, x: str, wts: _Weights,
               b: str | None, chain: Chain, flat, y: str, fma=None) -> None:  # noqa: ANN001
    """A 1x1 stride-1 unpadded conv of one group as pointwise.py's column tiles over each
    image's ``H*W`` plane read as one row (``plan``'s ``lanes`` channels x ``columns``), the
    chain on each tile's channels along its columns; with the ISA's register tile, runs of tiles
    reading ``X_BLOCK`` floats of input per channel block."""
    p = g.oh * g.ow
    src, dst = RowSource.of(x, g.c, 1, p), RowSource.of(y, g.oc, 1, p)
    tile = ColumnTile(taps=(0,), row=src.channel("n", "ci"), wp=wts.ptr, bp=b, group=g.group,
                      icg=g.icg, ocg=g.ocg, lanes=plan.lanes, columns=p, width=plan.columns,
                      packed=wts.packed, block=X_BLOCK if fma is not None else 0)

    def finish(width: int) -> None:
        open_channels(w, tile)
        emit_apply(w, chain, flat, ["n", "c", "i0"], width, lambda i: f"acc[o][{i}]",
                   lambda i: f"({dst.channel('n', 'c')})[i0 + {i}]")
        w.close()

    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    column_tiles(w, tile, finish, fma)
    w.close()


def _conv_pool(w, g: ConvGeom, x, wts: _Weights, b, chain: Chain, pg: PoolGeom, post: Chain, y):
    ocb = wts.ocb
    _row_loops(w, g)
    w.open(f"for (int ph = 0; ph < {pg.oh}; ++ph)")
    _ob_loop(w, g, ocb)

    def load(ih: str) -> str:
        _conv_row(w, g, x, wts, b, ocb, ih)
        w.open(f"for (int j = 0; j < {ocb}; ++j)")
        emit_apply(w, chain, [o.strides for o in chain.operands], ["n", "oc0 + j", ih, "0"],
                   g.ow, lambda i: f"acc[j][{i}]", lambda i: f"acc[j][{i}]")
        w.close()
        return "acc"

    emit_pool_row(w, pg, ocb, "pacc", "ph", load)
    ys = contiguous((pg.n, pg.c, pg.oh, pg.ow))
    w.open(f"for (int j = 0; j < {ocb}; ++j)")
    emit_apply(w, post, [o.strides for o in post.operands], ["n", "oc0 + j", "ph", "0"], pg.ow,
               lambda i: f"pacc[j][{i}]",
               lambda i: f"{y}[{offset_expr(['n', 'oc0 + j', 'ph', i], ys)}]")
    w.close()
    w.close()
    w.close()
    _close_row_loops(w)
