"""The one helper that builds int8 IR graphs for tests (docs/architecture.md, "int8 in the IR"):
ops keep their ONNX op_type, activations are int8 values, weights int8 and biases int32
initializers, each annotated with QuantParams; ``model.meta["opfuse.rounding"]`` set.

Also: compile such a model (partition only: the graph is already canonical) and run its C.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx_ir as ir

from opfuse.quant import ROUNDING, TFLITE, make_params, set_quant

_DT = {np.dtype(np.int8): ir.DataType.INT8, np.dtype(np.uint8): ir.DataType.UINT8,
       np.dtype(np.int32): ir.DataType.INT32, np.dtype(np.float32): ir.DataType.FLOAT,
       np.dtype(np.int64): ir.DataType.INT64}


class QGraph:
    """``g.input``/``g.const``/``g.op`` create annotated values; ``g.model()`` the ir.Model."""

    def __init__(self, rounding: str = TFLITE, opset: int = 17) -> None:
        self.rounding = rounding
        self.opset = opset
        self.inputs: list[ir.Value] = []
        self.outputs: list[ir.Value] = []
        self.nodes: list[ir.Node] = []
        self.inits: list[ir.Value] = []
        self.count = 0

    def _name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def input(self, shape, scale=None, zero_point=0, dtype=np.int8, name=None) -> ir.Value:
        v = ir.Value(name=name or self._name("x"), shape=ir.Shape(list(shape)),
                     type=ir.TensorType(_DT[np.dtype(dtype)]))
        if scale is not None:
            set_quant(v, make_params(scale, zero_point))
        self.inputs.append(v)
        return v

    def const(self, array, scale=None, zero_point=0, axis=None, name=None) -> ir.Value:
        arr = np.asarray(array)
        v = ir.Value(name=name or self._name("c"), shape=ir.Shape(list(arr.shape)),
                     type=ir.TensorType(_DT[arr.dtype]), const_value=ir.tensor(arr))
        if scale is not None:
            set_quant(v, make_params(scale, zero_point, axis))
        self.inits.append(v)
        return v

    def op(self, op_type: str, inputs, shape, scale=None, zero_point=0, dtype=np.int8,
           **attrs) -> ir.Value:
        out = ir.Value(name=self._name("v"), shape=ir.Shape(list(shape)),
                       type=ir.TensorType(_DT[np.dtype(dtype)]))
        if scale is not None:
            set_quant(out, make_params(scale, zero_point))
        node = ir.Node("", op_type, list(inputs), attributes=[
            ir.Attr(k, _attr_type(v), v) for k, v in attrs.items()], outputs=[out],
            name=self._name(op_type.lower()))
        self.nodes.append(node)
        return out

    def model(self, *outputs: ir.Value) -> ir.Model:
        graph = ir.Graph(self.inputs, list(outputs), nodes=self.nodes, initializers=self.inits,
                         opset_imports={"": self.opset}, name="g")
        model = ir.Model(graph, ir_version=8)
        model.meta[ROUNDING] = self.rounding
        return model


def _attr_type(v) -> ir.AttributeType:
    if isinstance(v, bool | int | np.integer):
        return ir.AttributeType.INT
    if isinstance(v, float):
        return ir.AttributeType.FLOAT
    if isinstance(v, str):
        return ir.AttributeType.STRING
    if isinstance(v, list | tuple):
        return ir.AttributeType.INTS if all(isinstance(x, int) for x in v) else \
            ir.AttributeType.FLOATS
    raise TypeError(f"attribute value {v!r}")


def compile_ir(model: ir.Model, target: str = "x86-host"):
    """A CompileResult of an already canonical IR model (no import, no rewrites)."""
    from opfuse.compiled import CompileResult
    from opfuse.fusion import partition
    from opfuse.targets import load_target

    tgt = load_target(target)
    return CompileResult(source="test", optimized=model, partition=partition(model, tgt),
                         passes={}, target=tgt)


def run_c(model: ir.Model, feeds: list[dict[str, np.ndarray]], fuse: bool = True,
          target: str = "x86-host", outdir: Path | None = None) -> list[dict[str, np.ndarray]]:
    """Emit, build (-Wall -Wextra -Werror) and run the model's C once per feed."""
    from opfuse.backends.c import emit_c
    from opfuse.measure.run.host import CModel, build_shared

    result = compile_ir(model, target)
    with tempfile.TemporaryDirectory(prefix="opfuse-q-") as tmp:
        folder = outdir or Path(tmp) / "m"
        emit_c(result, folder, fuse=fuse)
        build_shared(folder)
        cm = CModel(folder)
        return [cm.run(f) for f in feeds]


# --- the same ops as TFLite files (tests/helpers/tflite_builder.py), run in TFLite Micro ---------------

_ACT = {None: 0, "relu": 1, "relu_n1_to_1": 2, "relu6": 3}
_PAD = {"SAME": 0, "VALID": 1}


def tensor(b, shape, dtype, scale=None, zero_point=0, axis=0, data=None) -> int:
    """A tensor of TfliteBuilder ``b`` with a generated name."""
    return b.tensor(f"t{b_count(b)}", shape, dtype,
                    data=None if data is None else np.asarray(data, dtype), scale=scale,
                    zero_point=zero_point, axis=axis)


def b_count(b) -> int:
    """A fresh number per builder (tensor names must be unique)."""
    b.opfuse_count = getattr(b, "opfuse_count", 0) + 1
    return b.opfuse_count


def add_op(b, code: str, inputs, outputs, options=None) -> None:
    if options is None:
        b.op(code, inputs, outputs)
    else:
        b.op(code, inputs, outputs, options[0], **options[1])


def conv_options(stride=(1, 1), padding="SAME", act=None, dilation=(1, 1)):
    return ("Conv2DOptions", {"Padding": _PAD[padding], "StrideW": stride[1],
                              "StrideH": stride[0], "FusedActivationFunction": _ACT[act],
                              "DilationWFactor": dilation[1], "DilationHFactor": dilation[0]})


def dw_options(stride=(1, 1), padding="SAME", multiplier=1, act=None, dilation=(1, 1)):
    return ("DepthwiseConv2DOptions", {
        "Padding": _PAD[padding], "StrideW": stride[1], "StrideH": stride[0],
        "DepthMultiplier": multiplier, "FusedActivationFunction": _ACT[act],
        "DilationWFactor": dilation[1], "DilationHFactor": dilation[0]})


def fc_options(act=None):
    return ("FullyConnectedOptions", {"FusedActivationFunction": _ACT[act]})


def add_options(act=None):
    return ("AddOptions", {"FusedActivationFunction": _ACT[act]})


def sub_options(act=None):
    return ("SubOptions", {"FusedActivationFunction": _ACT[act]})


def mul_options(act=None):
    return ("MulOptions", {"FusedActivationFunction": _ACT[act]})


def pool_options(kernel, stride, padding="VALID", act=None):
    return ("Pool2DOptions", {"Padding": _PAD[padding], "StrideW": stride[1],
                              "StrideH": stride[0], "FilterWidth": kernel[1],
                              "FilterHeight": kernel[0], "FusedActivationFunction": _ACT[act]})


def softmax_options(beta=1.0):
    return ("SoftmaxOptions", {"Beta": beta})


def reducer_options(keep_dims=True):
    return ("ReducerOptions", {"KeepDims": bool(keep_dims)})


def concat_options(axis, act=None):
    return ("ConcatenationOptions", {"Axis": axis, "FusedActivationFunction": _ACT[act]})


def leaky_relu_options(alpha):
    return ("LeakyReluOptions", {"Alpha": alpha})


def run_tflm(model: bytes, runs: list[list[np.ndarray]], count: int = 1) -> list[list[np.ndarray]]:
    """Run ``model`` in TFLite Micro's Python interpreter once per input list; the outputs."""
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_bytes(model)
    results = []
    for inputs in runs:
        for i, x in enumerate(inputs):
            interp.set_input(x, i)
        interp.invoke()
        results.append([np.array(interp.get_output(i)).copy() for i in range(count)])
    return results
