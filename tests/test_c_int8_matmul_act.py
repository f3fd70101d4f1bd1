"""int8 MatMul of two activations, as quantize_static (QDQ) writes attention, against the
CPU-independent reference (onnxruntime ORT_DISABLE_ALL: Q/DQ around the float op): within one
quantization step (docs/architecture.md, "int8 in the IR")."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.quant import quantize

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
N = helper.make_node


def _init(name: str, shape: tuple[int, ...], seed: int) -> onnx.TensorProto:
    arr = np.random.default_rng(seed).standard_normal(shape) * 0.3
    return numpy_helper.from_array(arr.astype(np.float32), name)


def _model(nodes: list, shape: list[int], inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(m)


def _scores() -> onnx.ModelProto:
    """q @ k^T with q, k projections of the same input (3-D, k transposed in the graph)."""
    return _model([N("MatMul", ["x", "wq"], ["q"]), N("MatMul", ["x", "wk"], ["k"]),
                   N("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), N("MatMul", ["q", "kt"], ["y"])],
                  [2, 6, 8], [_init("wq", (8, 8), 1), _init("wk", (8, 8), 2)])


def _attention() -> onnx.ModelProto:
    """Scores of 2 heads (4-D), softmax, then the weighted sum of a value projection broadcast
    over the heads (v is [1, 5, 3], p is [1, 2, 5, 5])."""
    return _model([N("MatMul", ["x", "wq"], ["q"]), N("Transpose", ["x"], ["xt"], perm=[0, 1, 3, 2]),
                   N("MatMul", ["q", "xt"], ["s"]), N("Softmax", ["s"], ["p"], axis=-1),
                   N("ReduceMean", ["x"], ["xm"], axes=[1], keepdims=0),
                   N("MatMul", ["xm", "wv"], ["v"]), N("MatMul", ["p", "v"], ["y"])],
                  [1, 2, 5, 4], [_init("wq", (4, 4), 3), _init("wv", (4, 3), 4)])


@pytest.mark.parametrize("build", [_scores, _attention], ids=["scores", "attention"])
@pytest.mark.parametrize("activation", ["int8", "uint8"])
def test_activation_matmul_within_one_step(build, activation: str, tmp_path: Path) -> None:
    from opfuse.api import compile
    from opfuse.measure.validate.c_int8 import validate_c_int8

    path = quantize(build(), tmp_path, "qdq", per_channel=True, activation=activation, samples=8)
    result = compile(path)
    names = {n.name: n for n in result.optimized.graph}
    runtime_b = [k for k in result.partition.kernels if k.ops[0] == "MatMul"
                 and names[k.nodes[0]].inputs[1].const_value is None]
    assert runtime_b, "the case has no MatMul of two activations"
    report = validate_c_int8(result, trials=10, steps=1)
    assert report.ok, "\n".join(report.notes)
    assert all(o.max_abs_err <= 1 for o in report.outputs)
