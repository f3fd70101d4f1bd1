"""Quantized test models: onnxruntime's own quantizer applied to float models, and ORT runs.

The references are onnxruntime's: ``quantize_static`` writes the QDQ / QOperator models from a float
model and a small random calibration set, and onnxruntime runs the source model against what opfuse
emits (docs/architecture.md, "int8 in the IR").
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import opfuse.api as api
from opfuse.pipeline import compile_model


def quantize(float_model: onnx.ModelProto, folder: Path, fmt: str = "qdq", per_channel: bool = True,
             activation: str = "int8", samples: int = 4) -> Path:
    """``float_model`` quantized by onnxruntime (int8 weights), written under ``folder``."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    src = folder / "float.onnx"
    onnx.save(float_model, src)
    feeds = [random_inputs(float_model, seed) for seed in range(samples)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self):  # noqa: ANN201 (onnxruntime's interface)
            return next(self.items, None)

    out = folder / f"{fmt}_{activation}.onnx"
    quantize_static(
        str(src), str(out), Reader(),
        quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
        per_channel=per_channel,
        activation_type=QuantType.QInt8 if activation == "int8" else QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )  # fmt: skip
    return out


def float_builtin(name: str, size: int) -> onnx.ModelProto:
    """A built-in model at ``size`` x ``size`` input, canonicalized (BN folded) as float ONNX."""
    return api.emit(api.compile(name, "x86-host", input_shape=[f"input=1x3x{size}x{size}"]))


def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def session(model: onnx.ModelProto | Path, optimized: Path | None = None) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 1
    if optimized is not None:
        opts.optimized_model_filepath = str(optimized)
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def output_scale(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear writing the (first) graph output."""
    inits = {i.name: i for i in model.graph.initializer}
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear", node.op_type
    return float(numpy_helper.to_array(inits[node.input[1]]).reshape(-1)[0])


def ops_model() -> onnx.ModelProto:
    """A small float net touching many quantizable ops: Conv, LeakyRelu, AveragePool, MaxPool, Mul,
    Sigmoid, Concat, GlobalAveragePool, Flatten, MatMul, Add, Softmax."""
    rng = np.random.default_rng(7)

    def init(name: str, shape: tuple[int, ...], scale: float = 0.3) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["l1"], name="leaky", alpha=0.1),
        helper.make_node("AveragePool", ["l1"], ["a1"], name="avg", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxPool", ["l1"], ["m1"], name="max", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Sigmoid", ["m1"], ["s1"], name="sig"),
        helper.make_node("Mul", ["a1", "s1"], ["p1"], name="mul"),
        helper.make_node("Concat", ["p1", "a1"], ["k1"], name="concat", axis=1),
        helper.make_node("GlobalAveragePool", ["k1"], ["g1"], name="gap"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="flatten"),
        helper.make_node("MatMul", ["f1", "w2"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "b2"], ["fc"], name="bias"),
        helper.make_node("Softmax", ["fc"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [init("w1", (8, 4, 3, 3)), init("b1", (8,)), init("w2", (16, 10)), init("b2", (10,))],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def compile_model_from(proto, target: str):
    """The whole pipeline (import, canonicalize, partition) on an in-memory QDQ model."""
    folder = Path(tempfile.mkdtemp())
    path = folder / "model.onnx"
    onnx.save(proto, path)
    return compile_model(str(path), target)
