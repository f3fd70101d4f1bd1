"""Small float ONNX graphs written by hand for the C backend's tests: a value's type, a seeded
weight and a model at opset 17 (tests/test_c_backend.py, tests/test_c_convt.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper


def float_value(name: str, shape) -> onnx.ValueInfoProto:  # noqa: ANN001
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def weight(name: str, shape, seed: int = 0) -> onnx.TensorProto:  # noqa: ANN001
    """Standard-normal float32 values from ``seed``."""
    arr = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return onnx.numpy_helper.from_array(arr, name)


def model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:  # noqa: ANN001
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m
