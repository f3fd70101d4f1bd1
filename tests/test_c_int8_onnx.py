"""int8 C of QDQ ONNX (written by onnxruntime's quantize_static, per-channel) against onnxruntime's
own int8 execution (ORT_ENABLE_ALL turns QDQ into its QLinear kernels): within one
quantization step on every element (docs/architecture.md, "int8 in the IR": rounding "onnx")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.quant_util import ops_model, quantize

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
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_qdq_op_within_one_step_of_onnxruntime(case: str, tmp_path: Path) -> None:
    from opfuse.api import compile
    from opfuse.backends.c.check_int8 import validate_c_int8

    path = quantize(CASES[case](), tmp_path, "qdq", per_channel=True, samples=8)
    report = validate_c_int8(compile(path), trials=20, steps=1)
    assert report.ok, "\n".join(report.notes)
    assert all(o.max_abs_err <= 1 for o in report.outputs)
