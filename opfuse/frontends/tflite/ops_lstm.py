"""TFLite's UNIDIRECTIONAL_SEQUENCE_LSTM as one ONNX LSTM in QDQ form (docs/architecture.md,
"Recurrent kernels in C").

The op's 24 inputs: the input, four input and four recurrent weight matrices (gates input,
forget, cell, output; each ``[H, I]`` or ``[H, H]`` with its own scale), three peepholes, four
gate biases, a projection, the hidden and cell states (variables the interpreter zeroes on
reset: real 0, as ONNX's default initial state) and four layer-norm weights. It becomes

    DQ(x) [-> int8 Transpose to time-major] -> LSTM(W, R, B) -> Q(hidden's params) -> Reshape

with W ``[1, 4H, I]`` and R ``[1, 4H, H]`` in ONNX's gate order (i, o, f, c), dequantized per
row (axis 1: each gate's H rows share that gate's scale), and B ``[1, 8H]`` the four int32 biases
then zeros (TFLite's recurrent products have no bias). So the QDQ fold makes it one int8 LSTM
node; the int16 cell state's scale, which no ONNX input carries, rides on the node as metadata
(``quant.LSTM_CELL_SCALE``), and the int8 C reads it there (backends/c/int8/lstm.py). onnxruntime runs the
float LSTM: within a few steps of TFLite's integer arithmetic, not bit-exact.

A float LSTM (every tensor float32) is the same LSTM without the Q/DQ pairs (float C,
backends/c/recurrent.py; LiteRT its reference). Refused in one line: peepholes, projection,
layer norm, a coupled input gate (no input-gate weights), a cell activation other than tanh, a
cell or projection clip, hybrid models (float activations, int8 weights), an output quantized
unlike the hidden state (TFLite copies the hidden state into it).
"""

from __future__ import annotations

import numpy as np

from opfuse.frontends.tflite import layout as L
from opfuse.frontends.tflite.graph import Graph
from opfuse.frontends.tflite.reader import Operator
from opfuse.quant import LSTM_CELL_SCALE

TANH = 4  # ActivationFunctionType.TANH
# TFLite's input order (input, forget, cell, output) -> ONNX's (i, o, f, c)
ONNX_ORDER = (0, 3, 1, 2)
_ABSENT = {"peephole": (9, 10, 11), "projection": (16, 17), "layer norm": (20, 21, 22, 23)}


def _check(g: Graph, op: Operator) -> None:
    ins = op.inputs
    if len(ins) != 24:
        g.fail(f"has {len(ins)} inputs, not 24")
    for what, where in _ABSENT.items():
        if any(ins[i] >= 0 for i in where):
            g.fail(f"an LSTM with {what} weights is not supported")
    if any(ins[i] < 0 for i in (1, 5, 12)):
        g.fail("an LSTM without input gate weights (coupled input and forget gates) is not "
               "supported")
    o = op.options
    if o.FusedActivationFunction() != TANH:
        g.fail(f"cell activation {o.FusedActivationFunction()} is not supported (only tanh)")
    if o.CellClip() != 0.0 or o.ProjClip() != 0.0:
        g.fail("an LSTM with a cell or projection clip is not supported")
    x, h, c, y = ins[0], ins[18], ins[19], op.outputs[0]
    _check_shapes(g, op)
    kinds = {g.tensor(i).dtype for i in (x, h, y, c, *ins[1:9], *ins[12:16])}
    if kinds == {np.dtype(np.float32)}:
        return  # the float LSTM
    if g.quant(x) is None or g.tensor(x).dtype != np.int8 or g.tensor(c).dtype != np.int16 \
            or g.tensor(c).quant is None:
        g.fail("only the float and the int8 LSTM (int8 input and weights, int16 cell state) "
               "are imported")
    hq, yq = g.quant(h), g.quant(y)
    if hq is None or yq is None or float(hq.scale[0]) != float(yq.scale[0]) \
            or int(hq.zero_point[0]) != int(yq.zero_point[0]):
        g.fail("its output is quantized unlike its hidden state")


def _check_shapes(g: Graph, op: Operator) -> None:
    """TFLite Micro's ValidateTensorSize: x ``[B, T, I]`` (``[T, B, I]`` time-major), input
    weights ``[H, I]``, recurrent ``[H, H]``, biases ``[H]``, each state B x H elements."""
    ins = op.inputs
    x = g.shape(ins[0])
    if len(x) != 3 or len(g.shape(ins[1])) != 2:
        g.fail(f"input {list(x)} is not [batch, steps, features]")
    hidden, size = g.shape(ins[1])[0], x[2]
    batch = x[1] if op.options.TimeMajor() else x[0]
    want = {**{i: (hidden, size) for i in range(1, 5)}, **{i: (hidden, hidden) for i in range(5, 9)},
            **{i: (hidden,) for i in range(12, 16)}}
    for i, shape in want.items():
        if tuple(g.shape(ins[i])) != shape:
            g.fail(f"tensor {ins[i]} has shape {list(g.shape(ins[i]))}, not {list(shape)}")
    for i in (18, 19):
        if int(np.prod(g.shape(ins[i]))) != batch * hidden:
            g.fail(f"state tensor {ins[i]} {list(g.shape(ins[i]))} does not hold {batch} x "
                   f"{hidden} values")


def _stacked(g: Graph, indices: list[int], hint: str, zeros: int = 0) -> str:
    """The gate tensors ``indices`` (TFLite order) stacked in ONNX's order along a new axis 1
    of size 4H (+ ``zeros`` rows of zeros), dequantized per row."""
    arrays, scales = [], []
    if g.tensor(indices[0]).dtype == np.float32:  # the float LSTM: no DQ
        arrays = [g.need_const(indices[k], "gate weight") for k in ONNX_ORDER]
        if zeros:
            arrays.append(np.zeros(zeros, np.float32))
        return g.initializer(np.concatenate(arrays)[None], hint)
    for k in ONNX_ORDER:
        data = g.need_const(indices[k], "gate weight")
        arrays.append(data)
        q = g.tensor(indices[k]).quant
        if q is None or q.scale.size != 1 or np.any(q.zero_point != 0):
            g.fail(f"tensor {indices[k]} is not quantized per tensor around zero")
        scales.append(np.full(data.shape[0], q.scale[0], np.float32))
    if zeros:
        arrays.append(np.zeros((zeros, *arrays[0].shape[1:]), arrays[0].dtype))
        scales.append(np.ones(zeros, np.float32))
    stacked = np.concatenate(arrays)[None]
    scale = np.concatenate(scales)
    name = g.initializer(stacked, hint)
    return g.node("DequantizeLinear", [name, g.initializer(scale, f"{hint}_scale"),
                                       g.initializer(np.zeros(scale.size, stacked.dtype),
                                                     f"{hint}_zero_point")],
                  f"{hint}_dq", axis=1)


def unidirectional_sequence_lstm(g: Graph, op: Operator) -> None:
    _check(g, op)
    ins, out = op.inputs, op.outputs[0]
    time_major = bool(op.options.TimeMajor())
    x_shape = g.shape(ins[0])
    steps, batch = (x_shape[0], x_shape[1]) if time_major else (x_shape[1], x_shape[0])
    hidden = g.shape(ins[1])[0]
    seq_layout = L.identity(3) if time_major else (1, 0, 2)  # ONNX reads [T, B, I]
    x = g.read(ins[0], seq_layout)
    name = g.tensor(out).name
    w = _stacked(g, list(ins[1:5]), f"{name}_W")
    r = _stacked(g, list(ins[5:9]), f"{name}_R")
    b = _stacked(g, list(ins[12:16]), f"{name}_B", zeros=4 * hidden)  # [1, 8H]
    y = g.node("LSTM", [x, w, r, b], f"{name}_lstm", hidden_size=hidden)
    cell = g.tensor(ins[19]).quant
    if cell is None:  # the float LSTM: float C (backends/c/recurrent.py)
        rows = g.node("Reshape", [y, g.ints([steps, batch, hidden], f"{name}_seq_shape")], name)
        g.alias(out, rows, seq_layout)
        return
    g.nodes[-1].metadata_props.add(key=LSTM_CELL_SCALE, value=repr(float(cell.scale[0])))
    yq = g.quantize(y, out, f"{name}_seq")  # [T, 1, B, H] on the hidden state's params
    rows = g.node("Reshape", [g.dequantize(yq, out), g.ints([steps, batch, hidden],
                                                           f"{name}_seq_shape")], f"{name}_f")
    g.alias(out, g.quantize(rows, out, name), seq_layout)
