"""Importers of the weighted TFLite ops: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED.

Weights are permuted to ONNX's order at import (OHWI -> OIHW, depthwise 1HW(C*M) -> (C*M)1HW,
transpose-conv OHWI -> IOHW); a per-channel axis follows its dimension. Fused activations become a
following Relu/Clip inside the op's QDQ group (docs/architecture.md, "int8 in the IR").
"""

from __future__ import annotations

import numpy as np

from opfuse.frontends.tflite import layout as L
from opfuse.frontends.tflite.graph import Graph
from opfuse.frontends.tflite.reader import Operator

_RELU, _RELU_N1_TO_1, _RELU6, _TANH = 1, 2, 3, 4


def activation(g: Graph, x: str, code: int, hint: str) -> str:
    """The fused activation as its own node, so the partitioner sees op -> activation."""
    if code == 0:
        return x
    if code == _RELU:
        return g.node("Relu", [x], f"{hint}_relu")
    if code in (_RELU6, _RELU_N1_TO_1):
        lo, hi = (0.0, 6.0) if code == _RELU6 else (-1.0, 1.0)
        bounds = [g.initializer(np.float32(v), f"{hint}_clip") for v in (lo, hi)]
        return g.node("Clip", [x, *bounds], f"{hint}_clip")
    if code == _TANH:
        return g.node("Tanh", [x], f"{hint}_tanh")
    g.fail(f"fused activation {code} (SIGN_BIT) is not supported")
    return x


def _bias(g: Graph, op: Operator, position: int, channels: int) -> list[str]:
    """The bias input as a weight, when present; its length must be the output channels (ONNX's
    shape inference does not check a Gemm's or a Conv's bias)."""
    if len(op.inputs) > position and op.inputs[position] >= 0:
        index = op.inputs[position]
        size = int(np.prod(g.shape(index)))
        if size != channels:
            g.fail(f"bias tensor {index} has {size} values for {channels} output channels")
        return [g.weight(index)]
    return []


def conv_2d(g: Graph, op: Operator) -> None:
    o = op.options
    x_idx, w_idx, out = op.inputs[0], op.inputs[1], op.outputs[0]
    _, h, w, cin = g.shape(x_idx)
    cout, kh, kw, wcin = g.shape(w_idx)
    stride, dil = (o.StrideH(), o.StrideW()), (o.DilationHFactor(), o.DilationWFactor())
    name = g.tensor(out).name
    y = g.node(
        "Conv",
        [g.read(x_idx, L.NCHW), g.weight(w_idx, L.NCHW), *_bias(g, op, 2, cout)],
        f"{name}_conv",
        kernel_shape=[kh, kw], strides=list(stride), dilations=list(dil),
        pads=L.conv_pads(o.Padding(), (h, w), (kh, kw), stride, dil), group=cin // wcin,
    )
    g.write(out, activation(g, y, o.FusedActivationFunction(), name), L.NCHW)


def depthwise_conv_2d(g: Graph, op: Operator) -> None:
    o = op.options
    x_idx, w_idx, out = op.inputs[0], op.inputs[1], op.outputs[0]
    _, h, w, cin = g.shape(x_idx)
    _, kh, kw, channels = g.shape(w_idx)
    stride, dil = (o.StrideH(), o.StrideW()), (o.DilationHFactor(), o.DilationWFactor())
    name = g.tensor(out).name
    y = g.node(
        "Conv",
        [g.read(x_idx, L.NCHW), g.weight(w_idx, (3, 0, 1, 2)), *_bias(g, op, 2, channels)],
        f"{name}_dwconv",
        kernel_shape=[kh, kw], strides=list(stride), dilations=list(dil),
        pads=L.conv_pads(o.Padding(), (h, w), (kh, kw), stride, dil), group=cin,
    )
    g.write(out, activation(g, y, o.FusedActivationFunction(), name), L.NCHW)


def transpose_conv(g: Graph, op: Operator) -> None:
    """TFLite computes the full transposed conv and crops ``pad_before`` at the start of each
    spatial axis (the conv padding of the output size); the end takes what is left."""
    o = op.options
    w_idx, x_idx, out = op.inputs[1], op.inputs[2], op.outputs[0]
    _, h, w, _ = g.shape(x_idx)
    _, kh, kw, _ = g.shape(w_idx)
    _, oh, ow, channels = g.shape(out)
    stride = (o.StrideH(), o.StrideW())
    begin, end, extra = [], [], []
    for size, k, s, full_out in ((h, kh, stride[0], oh), (w, kw, stride[1], ow)):
        before = L.same_pads(full_out, k, s, 1)[0] if o.Padding() == 0 else 0
        after = s * (size - 1) + k - before - full_out
        begin.append(before)
        end.append(max(after, 0))
        extra.append(max(-after, 0))
    name = g.tensor(out).name
    y = g.node(
        "ConvTranspose",
        [g.read(x_idx, L.NCHW), g.weight(w_idx, (3, 0, 1, 2)), *_bias(g, op, 3, channels)],
        f"{name}_convt",
        kernel_shape=[kh, kw], strides=list(stride), pads=begin + end, output_padding=extra,
    )
    code = o.FusedActivationFunction() if hasattr(o, "FusedActivationFunction") else 0
    g.write(out, activation(g, y, code, name), L.NCHW)


def fully_connected(g: Graph, op: Operator) -> None:
    """Gemm(x, W, b, transB=1) on (out, in) weights; inputs of another rank are flattened to
    (-1, in) first and ``keep_num_dims`` restores them, each reshape a group of its own."""
    o = op.options
    x_idx, w_idx, out = op.inputs[0], op.inputs[1], op.outputs[0]
    units, depth = g.shape(w_idx)
    if o is not None and o.WeightsFormat() != 0:
        g.fail("shuffled (SHUFFLED4x16INT8) weights are not supported")
    x_shape = g.shape(x_idx)
    rows = int(np.prod(x_shape)) // depth
    if len(x_shape) == 2 and g.layout(x_idx) == (0, 1):
        x = g.read(x_idx)
    else:
        x = g.reshaped(x_idx, (rows, depth))
    name = g.tensor(out).name
    y = g.node("Gemm", [x, g.weight(w_idx), *_bias(g, op, 2, units)], f"{name}_fc", transB=1)
    y = activation(g, y, o.FusedActivationFunction() if o is not None else 0, name)
    if tuple(g.shape(out)) == (rows, units):
        g.write(out, y)
    else:
        g.write_reshaped(out, y, (rows, units))
