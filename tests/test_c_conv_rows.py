"""convrows.py's row nest layer by layer (column tiles over a line buffer, the nest of a
cascade's spatial members): a conv whose weights are a runtime input, and a conv ending in a
pool on a target that fuses it (npu-generic's ``anchor_pool``), against onnxruntime."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from opfuse.backends.c import emit_c
from opfuse.measure.validate.c_float import validate_c
from opfuse.pipeline import compile_model
from tests.helpers.sanitize import sanitized_run_matches

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

N = helper.make_node


def _f(name: str, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _w(name: str, shape: list[int], seed: int = 0, shift: float = 0.0) -> onnx.TensorProto:
    arr = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) + shift
    return onnx.numpy_helper.from_array(arr, name)


def _model(nodes, inputs, inits=()) -> onnx.ModelProto:  # noqa: ANN001
    graph = helper.make_graph(nodes, "g", inputs, [_f("y", None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _bn(x: str, y: str, c: int) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    inits = [_w("s", [c], 5), _w("o", [c], 6), _w("m", [c], 7), _w("v", [c], 8, 3.0)]
    return N("BatchNormalization", [x, "s", "o", "m", "v"], [y]), inits


# (model, target, whether the pool must run in the conv's kernel)
CASES = {
    # weights and bias as inputs, 3x3 stride 2, padded, two groups of 6 channels (2 a tile),
    # rows of 7 columns (a tile of 8 over the line buffer's zero tail), two images
    "runtime_3x3_s2_grouped": (_model(
        [N("Conv", ["x", "w", "b"], ["c"], group=2, strides=[2, 2], pads=[1, 0, 1, 2]),
         N("Relu", ["c"], ["y"])],
        [_f("x", [2, 8, 11, 13]), _f("w", [12, 4, 3, 3]), _f("b", [12])]), "x86-host", False),
    # rows of 36 columns (tiles of 16, the last moved back), dilated, a residual Add
    "runtime_dilated_residual": (_model(
        [N("Conv", ["x", "w"], ["c"], dilations=[1, 2], pads=[1, 2, 1, 2]),
         N("Add", ["c", "r"], ["y"])],
        [_f("x", [1, 6, 9, 36]), _f("w", [8, 6, 3, 3]), _f("r", [1, 8, 9, 36])]), "x86-host",
        False),
    # unpadded, stride 1 across and 2 down, dilated down: its rows read in place, no line buffer
    "runtime_valid_in_place": (_model(
        [N("Conv", ["x", "w", "b"], ["y"], strides=[2, 1], dilations=[2, 1])],
        [_f("x", [2, 5, 13, 21]), _f("w", [4, 5, 3, 3]), _f("b", [4])]), "x86-host", False),
    # 1x1 with an operand broadcast along the columns (the plane cannot be one row): its rows
    "runtime_1x1_rows": (_model(
        [N("Conv", ["x", "w"], ["c"]), N("Add", ["c", "r"], ["y"])],
        [_f("x", [1, 6, 5, 11]), _f("w", [4, 6, 1, 1]), _f("r", [1, 4, 5, 1])]), "x86-host",
        False),
    # a scalar FPU's build of the same nest (cortex-m4's C, run on the host)
    "runtime_3x3_s2_m4": (_model(
        [N("Conv", ["x", "w", "b"], ["c"], group=2, strides=[2, 2], pads=[1, 1, 1, 1]),
         N("Relu", ["c"], ["y"])],
        [_f("x", [1, 8, 12, 17]), _f("w", [12, 4, 3, 3]), _f("b", [12])]), "cortex-m4", False),
    # constant weights, two groups of 12 (8 a tile, zero-padded), BN + ReLU, a 3x3/2 MaxPool
    "pool_grouped_max": (_model(
        [N("Conv", ["x", "w", "b"], ["c"], group=2, pads=[1, 1, 1, 1]), _bn("c", "n", 24)[0],
         N("Relu", ["n"], ["r"]),
         N("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
        [_f("x", [1, 8, 13, 15])],
        [_w("w", [24, 4, 3, 3], 1), _w("b", [24], 2), *_bn("c", "n", 24)[1]]), "npu-generic",
        True),
    # runtime weights, stride 2, an AveragePool counting its padding
    "pool_runtime_avg": (_model(
        [N("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
         N("AveragePool", ["c"], ["y"], kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 1],
           count_include_pad=1)],
        [_f("x", [1, 5, 20, 22]), _f("w", [6, 5, 3, 3])]), "npu-generic", True),
    # depthwise, a clamp, a 2x2 MaxPool of 1-D rows
    "pool_depthwise_1d": (_model(
        [N("Conv", ["x", "w", "b"], ["c"], group=6, pads=[2, 2]),
         N("Clip", ["c", "lo", "hi"], ["r"]), N("MaxPool", ["r"], ["y"], kernel_shape=[2],
                                                strides=[2])],
        [_f("x", [2, 6, 30])],
        [_w("w", [6, 1, 5], 3), _w("b", [6], 4), onnx.numpy_helper.from_array(
            np.array(-0.5, np.float32), "lo"), onnx.numpy_helper.from_array(
            np.array(1.5, np.float32), "hi")]), "npu-generic", True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_conv_rows_match_onnxruntime(case: str, tmp_path: Path) -> None:
    model, target, pooled = CASES[case]
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    result = compile_model(path, target)
    conv = next(k for k in result.partition.kernels if k.ops[0] == "Conv")
    assert pooled == any("Pool" in op for op in conv.ops), conv.ops  # the path it claims
    report = validate_c(result, outdir=tmp_path / "c")
    assert report.ok, report
    for out in report.outputs:
        assert out.max_abs_err <= 1e-4 * out.max_ref + 1e-5, out


@pytest.mark.parametrize("case", ["runtime_3x3_s2_grouped", "runtime_valid_in_place",
                                  "pool_grouped_max", "pool_runtime_avg"])
def test_conv_rows_are_sanitizer_clean(case: str, tmp_path: Path) -> None:
    """The line buffer, the tiles moved back to a row's end and the pool's ring of conv rows
    stay inside their arrays (AddressSanitizer, UndefinedBehaviorSanitizer)."""
    model, target, _ = CASES[case]
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    emit_c(compile_model(path, target), tmp_path / "c")
    sanitized_run_matches(tmp_path / "c", path, atol=1e-5)
