"""Quantized ONNX one-op models (QDQ) the int8 C is checked on (tests/test_c_int8_onnx.py,
benchmarks/qdq_reference_cpu.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.quant import ops_model

RNG = np.random.default_rng(0)


def _init(name, shape, scale=0.3):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, inits, shape=(1, 8, 10, 10)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(m)


N = helper.make_node


CONV = [_init("w", (8, 8, 3, 3)), _init("b", (8,))]


CASES = {
    "conv": lambda: _model([N("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], CONV),
    "conv_relu6": lambda: _model(
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Clip", ["c", "lo", "hi"], ["y"])],
        [*CONV, numpy_helper.from_array(np.float32(0), "lo"),
         numpy_helper.from_array(np.float32(6), "hi")]),
    "depthwise_s2": lambda: _model(
        [N("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], group=8, strides=[2, 2])],
        [_init("w", (8, 1, 3, 3)), _init("b", (8,))]),
    "residual_add": lambda: _model(
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Add", ["c", "x"], ["y"])], CONV),
    "global_average_pool": lambda: _model([N("GlobalAveragePool", ["x"], ["y"])], []),
    "gemm": lambda: _model([N("Flatten", ["x"], ["f"]), N("Gemm", ["f", "w", "b"], ["y"], transB=1)],
                           [_init("w", (10, 800), 0.05), _init("b", (10,))]),
    "many_ops": ops_model,
    "conv_resize_linear": lambda: _model(
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         N("Resize", ["c", "", "", "sz"], ["y"], mode="linear")],
        [*CONV, numpy_helper.from_array(np.array([1, 8, 17, 23], np.int64), "sz")]),
}
