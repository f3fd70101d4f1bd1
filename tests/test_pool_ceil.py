"""Pools with ceil_mode whose last window starts in the end padding (opfuse/frontends/pool_ceil.py):
onnx's inference before opset 22 counts one window more than onnxruntime computes; opfuse counts
as onnxruntime does, and its C matches onnxruntime's values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from opfuse.frontends.pool_ceil import runtime_extent
from opfuse.measure.validate.c_float import validate_c
from opfuse.pipeline import compile_model


def _pool(op: str, opset: int, n: int, k: int, s: int, pads: list[int], **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=pads,
                            ceil_mode=1, **attrs)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, n, n + 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_the_runtime_count_drops_a_window_that_starts_in_the_padding() -> None:
    assert runtime_extent(5, 1, 1, 2, 2) == (4, 3)  # the last window would start at 5 = n
    assert runtime_extent(4, 1, 1, 3, 2) == (3, 3)  # starts at 3, inside the input: kept
    assert runtime_extent(7, 0, 0, 3, 2) == (3, 3)


CASES = [("MaxPool", 11, {}), ("MaxPool", 19, {}), ("AveragePool", 11, {}),
         ("AveragePool", 19, {"count_include_pad": 1}), ("AveragePool", 22, {}),
         ("LpPool", 18, {"p": 2})]


@pytest.mark.parametrize(("op", "opset", "attrs"), CASES, ids=lambda v: str(v))
def test_ceil_pools_count_and_compute_as_onnxruntime(op: str, opset: int, attrs: dict,
                                                     tmp_path: Path) -> None:
    model = _pool(op, opset, 5, 2, 2, [1, 1, 1, 1], **attrs)
    path = tmp_path / "pool.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 6)).astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    want = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert want.shape[2] == 3  # onnxruntime's count, whatever the opset's inference says
    out = compile_model(path).optimized.graph.outputs[0]
    assert list(out.shape) == list(want.shape)
    if op != "LpPool":  # LpPool has no C kernel
        assert validate_c(path, outdir=tmp_path / "c").ok
