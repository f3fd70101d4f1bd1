"""int8 anchors: Conv (general, grouped, depthwise with multiplier, 1x1) and Gemm/MatMul with
constant weights, TFLite's reference semantics: (x - z_x) * (w - z_w) summed in int32, + int32
bias, per-channel requantization, + z_y, clamp (the fused activation), then the int8 epilogue.

Layout NCHW (the IR's; docs/architecture.md "Layout of TFLite models"). Taps outside the input
contribute nothing (the input's zero point is TFLite's padding value): the portable conv reads
them as z_x from a padded line buffer and folds ``-z_x`` times every weight into the bias, so the
tap loops have no tests. Its path is the plan's (kernelplan/conv8.py): the depthwise SIMD pairs,
or pointwise.py's tiles (int8/pointwise.py, int8/row_tiles.py): column tiles, or on short rows
(``conv_lanes``) channel tiles. Weights are int8 in weights.c, biases int32.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims, who
from opfuse.backends.c.conv import conv_geom
from opfuse.backends.c.ctype import INT8, INT32
from opfuse.backends.c.int8 import conv_mcu, gemm_mcu, row_tiles
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import (
    bias_array,
    conv_operands,
    gemm_coords,
    int_ctype,
    quant,
    requant_arrays,
    rounding,
)
from opfuse.backends.c.int8.depthwise_dsp import emit_depthwise8
from opfuse.backends.c.int8.matmul_act import emit_matmul_act8
from opfuse.backends.c.int8.output import requant_clamp
from opfuse.backends.c.int8.plan import conv8_of, conv8_plan
from opfuse.backends.c.int8.pointwise import (
    Int8Sums,
    emit_pointwise8,
    folded_bias,
    pairs_fit_int16,
)
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.rowsource import RowSource
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.quant import conv_scales


def _check_zero_point(node: ir.Node, value: ir.Value) -> None:
    if np.any(quant(value, node, "weight").zero_point):
        raise OpfuseError(f"C backend: {who(node)}: weights with a nonzero zero point are not "
                          "emitted")


def _weights(params: Params, node: ir.Node, value: ir.Value, key: str,
             layout: np.ndarray) -> str:
    """Store constant int8 weights (already in the kernel's layout)."""
    _check_zero_point(node, value)
    return params.weight(key, layout.astype(np.int8), INT8)


def _bias(params: Params, node: ir.Node, index: int, channels: int) -> str | None:
    v = node.inputs[index] if len(node.inputs) > index else None
    if v is None:
        return None
    arr = const(v)
    if arr is None:
        raise OpfuseError(f"C backend: {who(node)}: an int8 kernel needs a constant bias")
    if arr.dtype.kind not in "iu":
        raise OpfuseError(f"C backend: {who(node)}: an int8 kernel's bias must be int32")
    return params.weight(f"{v.name}:bias", np.broadcast_to(arr.ravel(), (channels,)), INT32)


def emit_conv8_view(w: CWriter, view: ir.Node, node: ir.Node, pre: list[ir.Node],
                    params: Params) -> None:
    """A conv reading a graph input's NHWC -> NCHW Transpose in place (fusion/views.py): the
    matrix core's fill addresses NHWC rows; an ISA conv that reads them (``conv8_nhwc``: x86's
    staging) takes it with the portable C below, through an NHWC ``RowSource``, in its #else;
    no other int8 path takes it (support.py)."""
    g = conv_geom(node)
    isa = kernels(params.store.isa)
    if isa.conv8 is not None and isa.conv8_nhwc and g.group == 1:
        if not isa.conv8(w, node, pre, params,
                         lambda c: _conv8_c(c, node, pre, params, view), view=view):
            _conv8_c(w, node, pre, params, view)
        return
    if not conv_mcu.uses_matrix_core(g, params) or isa.conv8 is not None:
        raise OpfuseError(f"C backend: {who(node)}: this target's int8 conv does not read an "
                          "NHWC input in place")
    conv_mcu.emit_conv_mcu(w, node, pre, params, g, view)


def emit_conv8(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params) -> None:
    """The ISA's int8 conv (``IsaKernels.conv8``, which writes this C in its ``#else``) where it
    takes the conv, else the portable C below."""
    conv8 = kernels(params.store.isa).conv8
    if conv8 is None or not conv8(w, node, pre, params, lambda c: _conv8_c(c, node, pre, params)):
        _conv8_c(w, node, pre, params)


def _conv8_c(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
             view: ir.Node | None = None) -> None:
    """The portable int8 conv; ``view`` (a group-1 conv on a non-SMLAD target): the graph
    input's NHWC Transpose read in place, every read through an NHWC ``RowSource``."""
    g = conv_geom(node)
    if conv_mcu.uses_matrix_core(g, params):
        conv_mcu.emit_conv_mcu(w, node, pre, params, g)
        return
    xv, wv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    arr, xq, wq, yq = conv_operands(node)
    xct, yct = int_ctype(xv, node), int_ctype(yv, node)
    plan = conv8_plan(g, node, xct.name)
    if plan.path == "depthwise":  # SIMD pairs of pixels (depthwise_dsp.py)
        return emit_depthwise8(w, node, pre, params, g)
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    # every tap reads x or z_x: sum (x - z_x) w = sum x w - z_x sum w, in the bias
    b = folded_bias(params, f"{node.name}:bias", bias_array(node, 2, g.oc), arr, zx)
    rq = requant_arrays(params, f"{node.name}", conv_scales(xq, wq, yq, g.oc, rounding(params)))
    x = params.inp(xv, node) if view is None else params.inp(view.inputs[0], view)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    pairs = pairs_fit_int16(xct.name, arr) and view is None  # a stem's 3 channels: no pairs
    sums = Int8Sums(xct.name, rq, zy, yct, 2 if pairs else 1)
    wt = packed_weights(params, wv, g, plan.ocb)
    # a pointwise plane read as one row: pixel tiles (``pointwise``) or, a plane under one
    # tile, channel tiles (``conv_lanes``); every other conv: its rows over a line buffer
    plane = plan.path == "pointwise" or (plan.path == "conv_lanes"
                                         and conv8_of(g, node, xct.name).pointwise)
    if view is not None:
        src = RowSource.nhwc(x, g.c, g.ih, g.iw)
    else:
        src = RowSource.of(x, g.c, 1, g.ih * g.iw) if plane else RowSource.of(x, g.c, g.ih, g.iw)
    if plane:
        emit_pointwise8(w, g, plan, src, wt, b, sums, chain, len(shape), y)
    else:
        row_tiles.emit_row_tiles8(w, g, zx, plan, src, wt, b, sums, chain, len(shape), y)


def packed_weights(params: Params, wv: ir.Value, g, ocb: int) -> str:
    """The weights in blocks of ``ocb`` output channels, [block][ICg][KH][KW][ocb] (int8), as
    the column tiles (``ColumnTile.packed``) read them (``wb``: a block's start)."""
    w4 = const(wv).astype(np.int32).reshape(g.oc // ocb, ocb, g.icg, g.k[0] * g.k[1])
    return params.weight(f"{wv.name}:ocb{ocb}", w4.transpose(0, 2, 3, 1).astype(np.int8), INT8)


def emit_gemm8(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params) -> None:
    """Gemm (alpha = beta = 1, transA = 0) or MatMul with a constant 2-D B: y[m, n] over K."""
    av, bv = node.inputs[0], node.inputs[1]
    arr = const(bv)
    if arr is None and node.op_type == "MatMul":  # two activations (attention)
        emit_matmul_act8(w, node, pre, params)
        return
    if arr is None or arr.ndim != 2:
        raise OpfuseError(f"C backend: {who(node)}: an int8 {node.op_type} needs a constant 2-D B")
    tb = node.op_type == "Gemm" and int(attr(node, "transB", 0))
    if node.op_type == "Gemm" and (int(attr(node, "transA", 0))
                                   or float(attr(node, "alpha", 1.0)) != 1.0
                                   or float(attr(node, "beta", 1.0)) != 1.0):
        raise OpfuseError(f"C backend: {who(node)}: an int8 Gemm needs transA=0, alpha=beta=1")
    nk = arr if tb else arr.T
    n_out, k = nk.shape
    a_shape = dims(av, node)
    if a_shape[-1] != k:
        raise OpfuseError(f"C backend: {who(node)}: A's last dim is not B's K")
    if conv_mcu.uses_matrix_gemm(params):
        gemm_mcu.emit_gemm_mcu(w, node, pre, params, nk)
        return
    gemm8 = kernels(params.store.isa).gemm8  # the ISA's, this C in its #else
    if gemm8 is None or not gemm8(w, node, pre, params, nk,
                                  lambda c: _gemm8_c(c, node, pre, params, nk)):
        _gemm8_c(w, node, pre, params, nk)


def _gemm8_c(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
             nk: np.ndarray) -> None:
    av, bv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    n_out, k = nk.shape
    a_shape = dims(av, node)
    rows = int(np.prod(a_shape[:-1])) if len(a_shape) > 1 else 1
    aq, bq, yq = quant(av, node, "input"), quant(bv, node, "weight"), quant(yv, node, "output")
    act = int_ctype(av, node)
    yct = int_ctype(yv, node)
    wt = _weights(params, node, bv, f"{bv.name}:nk", np.ascontiguousarray(nk))
    b = _bias(params, node, 2, n_out) if node.op_type == "Gemm" else None
    rq = requant_arrays(params, node.name, conv_scales(aq, bq, yq, n_out, rounding(params)))
    a = params.inp(av, node)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    za, zy = int(aq.zero_point[0]), int(yq.zero_point[0])
    w.open(f"for (int m = 0; m < {rows}; ++m)")
    w(f"const {act.name} *ar = {a} + m*{k};")
    w.open(f"for (int j = 0; j < {n_out}; ++j)")
    w(f"const int8_t *br = {wt} + j*{k};")
    w(f"int32_t acc = {b + '[j]' if b else '0'};")
    kernels(params.store.isa).dot(w, "acc", "ar", act.name, za, "br", k)
    w(f"int32_t v = {requant_clamp(rq, 'acc', 'j', zy, yct)};")
    if chain is not None:
        v = chain.emit(w, "v", gemm_coords(shape))
        w(f"v = {v};")
    w(f"{y}[m*{n_out} + j] = ({yct.name})v;")
    w.close()
    w.close()
