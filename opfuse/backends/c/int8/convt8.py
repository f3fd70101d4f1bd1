"""The int8 ConvTranspose (TFLite's TRANSPOSE_CONV: ``sum (x - z_x) w`` over the taps inside the
input, + int32 bias, per-channel requantization, + z_y, clamp) as the float one's sub-pixel phases
(backends/c/convt.py, ``emit_phases``) over the ``Int8Sums`` record of the column tiles: the line
buffer padded with z_x, so a phase's every tap reads x or z_x and its bias folds ``-z_x`` times
that phase's weights (each phase its own bias: ``pointwise.folded_bias`` over its taps); the
requantization, the int8 chain and the strided store are the tile's finish."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims, who
from opfuse.backends.c.convdirect import pack_weights
from opfuse.backends.c.convt import PhaseArith, convt_geom, emit_phases, empty_phases
from opfuse.backends.c.ctype import INT8, INT32
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import (
    bias_array,
    conv_operands,
    int_ctype,
    requant_arrays,
    rounding,
)
from opfuse.backends.c.int8.pointwise import Int8Sums, pairs_fit_int16
from opfuse.backends.c.pointwise import ColumnTile, open_channels
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.kernelplan.convt import live, plan_convt
from opfuse.quant import conv_scales


def emit_convt8(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params) -> None:
    g = convt_geom(node)
    xv, yv = node.inputs[0], node.outputs[0]
    arr, xq, wq, yq = conv_operands(node)
    if g.group != 1 and wq.scale.size != 1:
        raise OpfuseError(f"C backend: {who(node)}: an int8 ConvTranspose of several groups "
                          "takes per-tensor weight scales only")
    plan = plan_convt(g, True, merge=False)
    if empty_phases(plan):
        raise OpfuseError(f"C backend: {who(node)}: an int8 ConvTranspose with outputs no tap "
                          "reaches (a stride above the kernel's reach) is not emitted")
    xct, yct = int_ctype(xv, node), int_ctype(yv, node)
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    bias = bias_array(node, 2, g.oc)
    conv = (np.asarray(arr, np.int64).reshape(g.group, g.icg, g.ocg, *g.k)
            .transpose(0, 2, 1, 3, 4).reshape(g.oc, g.icg, *g.k))  # a conv's [OC][ICg][KH][KW]
    blocks = -(-g.ocg // plan.lanes)
    blocks_of = [(b * plan.lanes, min(plan.lanes, g.ocg - b * plan.lanes), plan.lanes)
                 for b in range(blocks)]
    wps, bps = {}, {}
    for a in live(plan.rows):
        for b in live(plan.cols):
            sub = conv[:, :, [k for k, _ in a.taps]][:, :, :, [k for k, _ in b.taps]]
            packed, _ = pack_weights(sub, g.group, blocks_of)
            wps[a.r, b.r] = params.weight(f"{node.name}:convt_{a.r}_{b.r}",
                                          packed.astype(np.int8), INT8)
            folded = np.zeros((g.group, blocks * plan.lanes), np.int64)
            folded[:, :g.ocg] = (bias - zx * sub.reshape(g.oc, -1).sum(axis=1)).reshape(
                g.group, g.ocg)
            bps[a.r, b.r] = params.weight(f"{node.name}:convt_bias_{a.r}_{b.r}",
                                          folded.ravel().astype(np.int32), INT32)
    rq = requant_arrays(params, node.name, conv_scales(xq, wq, yq, g.oc, rounding(params)))
    sums = Int8Sums(xct.name, rq, zy, yct, 2 if pairs_fit_int16(xct.name, arr) else 1)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    x = params.inp(xv, node)

    def store(tile: ColumnTile, width: int, count: int) -> None:
        open_channels(w, tile)
        w.open(f"for (int t = 0; t < {min(width, count)}; ++t)")
        w(f"const int ow = rw + (c0 + i0 + t)*{g.s[1]};")
        sums.finish(w, "acc[o][t]")
        if chain is not None:
            w(f"v = {chain.emit(w, 'v', ['n', 'c', 'oh', 'ow'] if len(shape) == 4 else ['n', 'c', 'ow'])};")
        w(f"{y}[((n*{g.oc} + c)*{g.oh} + oh)*{g.ow} + ow] = ({yct.name})v;")
        w.close()
        w.close()

    emit_phases(w, g, plan, x, wps, PhaseArith(sums, xct.name, str(zx), bps, store), params)
