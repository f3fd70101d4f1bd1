"""Importers of TFLite's elementwise, pooling, reduction and activation ops.

Ops that do not care about layout keep their input's (an NCHW activation stays NCHW); axes given
in NHWC terms are mapped through the tensor's layout (docs/architecture.md, "Layout of TFLite
models").
"""

from __future__ import annotations

import numpy as np

from opfuse.frontends.tflite import layout as L
from opfuse.frontends.tflite.graph import Graph
from opfuse.frontends.tflite.ops_conv import activation
from opfuse.frontends.tflite.reader import Operator


def _home_of(g: Graph, indices, rank: int) -> tuple[int, ...]:
    """The layout of the first produced (non-constant) input of ``rank``; identity otherwise."""
    for i in indices:
        if i >= 0 and i not in g.consts and len(g.shape(i)) == rank:
            return g.prefer(i)
    return L.identity(rank)


def read_broadcast(g: Graph, index: int, rank: int, layout: tuple[int, ...]) -> str:
    """Tensor ``index`` as a float operand of a rank-``rank`` op in ``layout``: numpy's right-aligned
    broadcasting in TFLite terms, made explicit (leading unit dims) before the permutation."""
    shape = g.shape(index)
    if len(shape) == rank:
        return g.read(index, layout)
    full = (1,) * (rank - len(shape)) + tuple(shape)
    data = g.const(index)
    if data is not None:
        t = g.tensor(index)
        init = g.initializer(np.ascontiguousarray(data.reshape(full).transpose(layout)), t.name)
        if g.quant(index) is not None:
            return g.dequantize(init, index)
        if data.dtype != np.float32:
            return g.node("Cast", [init], f"{t.name}_f32", to=1)
        return init
    x = g.node("Reshape", [g.read(index, L.identity(len(shape))), g.ints(full, "bcast_shape")],
               f"{g.tensor(index).name}_bcast")
    if layout != L.identity(rank):
        x = g.node("Transpose", [x], f"{g.tensor(index).name}_bcast_t", perm=list(layout))
    return x


def _fused(op: Operator) -> int:
    o = op.options
    return o.FusedActivationFunction() if o is not None and hasattr(o, "FusedActivationFunction") else 0


def binary(onnx_op: str):
    def importer(g: Graph, op: Operator) -> None:
        out = op.outputs[0]
        rank = len(g.shape(out))
        lay = _home_of(g, op.inputs[:2], rank)
        a, b = (read_broadcast(g, i, rank, lay) for i in op.inputs[:2])
        name = g.tensor(out).name
        y = g.node(onnx_op, [a, b], f"{name}_{onnx_op.lower()}")
        g.write(out, activation(g, y, _fused(op), name), lay)

    return importer


def unary(onnx_op: str, **attrs):
    def importer(g: Graph, op: Operator) -> None:
        x, out = op.inputs[0], op.outputs[0]
        lay = g.prefer(x)
        y = g.node(onnx_op, [g.read(x, lay)], f"{g.tensor(out).name}_{onnx_op.lower()}", **attrs)
        g.write(out, y, lay)

    return importer


def clip(lo: float, hi: float):
    def importer(g: Graph, op: Operator) -> None:
        x, out = op.inputs[0], op.outputs[0]
        lay = g.prefer(x)
        name = g.tensor(out).name
        bounds = [g.initializer(np.float32(v), f"{name}_clip") for v in (lo, hi)]
        g.write(out, g.node("Clip", [g.read(x, lay), *bounds], f"{name}_clip"), lay)

    return importer


def leaky_relu(g: Graph, op: Operator) -> None:
    unary("LeakyRelu", alpha=float(op.options.Alpha()))(g, op)


def prelu(g: Graph, op: Operator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    lay = g.prefer(x)
    slope = read_broadcast(g, op.inputs[1], len(g.shape(x)), lay)
    g.write(out, g.node("PRelu", [g.read(x, lay), slope], f"{g.tensor(out).name}_prelu"), lay)


def softmax(g: Graph, op: Operator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    lay = g.prefer(x)
    name = g.tensor(out).name
    v = g.read(x, lay)
    beta = float(op.options.Beta()) if op.options is not None else 1.0
    if beta != 1.0:
        v = g.node("Mul", [v, g.initializer(np.float32(beta), f"{name}_beta")], f"{name}_scaled")
    axis = lay.index(len(lay) - 1)
    g.write(out, g.node("Softmax", [v], f"{name}_softmax", axis=axis), lay)


def pool(onnx_op: str):
    def importer(g: Graph, op: Operator) -> None:
        o = op.options
        x, out = op.inputs[0], op.outputs[0]
        _, h, w, _ = g.shape(x)
        k, s = (o.FilterHeight(), o.FilterWidth()), (o.StrideH(), o.StrideW())
        attrs = {"kernel_shape": list(k), "strides": list(s),
                 "pads": L.conv_pads(o.Padding(), (h, w), k, s)}
        if onnx_op == "AveragePool":
            attrs["count_include_pad"] = 0  # TFLite averages over the valid pixels only
        name = g.tensor(out).name
        y = g.node(onnx_op, [g.read(x, L.NCHW)], f"{name}_{onnx_op.lower()}", **attrs)
        g.write(out, activation(g, y, o.FusedActivationFunction(), name), L.NCHW)

    return importer


def mean(g: Graph, op: Operator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    rank = len(g.shape(x))
    lay = g.prefer(x)
    axes = sorted({int(a) % rank for a in np.ravel(g.need_const(op.inputs[1], "axes"))})
    keep = bool(op.options.KeepDims()) if op.options is not None else False
    ir_axes = sorted(lay.index(a) for a in axes)
    y = g.node("ReduceMean", [g.read(x, lay)], f"{g.tensor(out).name}_mean", axes=ir_axes,
               keepdims=int(keep))
    if keep:
        g.write(out, y, lay)
        return
    kept = [lay[i] for i in range(rank) if i not in ir_axes]  # TFLite axes, in IR order
    order = sorted(kept)
    g.write(out, y, tuple(order.index(a) for a in kept))


def pad(g: Graph, op: Operator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    lay = g.prefer(x)
    pads = np.asarray(g.need_const(op.inputs[1], "paddings")).reshape(-1, 2).astype(np.int64)
    onnx_pads = [int(pads[a, 0]) for a in lay] + [int(pads[a, 1]) for a in lay]
    inputs = [g.read(x, lay), g.ints(onnx_pads, f"{g.tensor(out).name}_pads")]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        value = np.asarray(g.need_const(op.inputs[2], "constant value")).reshape(-1)[0]
        q = g.tensor(op.inputs[2]).quant
        real = (float(value) - float(q.zero_point[0])) * float(q.scale[0]) if q is not None and \
            g.tensor(op.inputs[2]).dtype.kind in "iu" else float(value)
        inputs.append(g.initializer(np.float32(real), f"{g.tensor(out).name}_pad_value"))
    g.write(out, g.node("Pad", inputs, f"{g.tensor(out).name}_pad"), lay)


def concatenation(g: Graph, op: Operator) -> None:
    out = op.outputs[0]
    rank = len(g.shape(out))
    lay = _home_of(g, op.inputs, rank)
    axis = lay.index(int(op.options.Axis()) % rank)
    name = g.tensor(out).name
    y = g.node("Concat", [g.read(i, lay) for i in op.inputs], f"{name}_concat", axis=axis)
    g.write(out, activation(g, y, _fused(op), name), lay)


def quantize(g: Graph, op: Operator) -> None:
    """float -> int8 is QuantizeLinear; int8 -> int8 (a requantization) is DQ -> Q. A float graph
    input is quantized in its own NHWC layout: the boundary Transpose then moves int8 bytes (a
    quarter of the float copy) and a conv may read them in place (fusion/views.py)."""
    x, out = op.inputs[0], op.outputs[0]
    lay = g.layout(x) if x in g.model.inputs and g.quant(x) is None else g.prefer(x)
    g.write(out, g.read(x, lay), lay)


def dequantize(g: Graph, op: Operator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    lay = g.prefer(x)
    g.write(out, g.read(x, lay), lay)
