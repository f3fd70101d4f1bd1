"""Float32 MaxPool / AveragePool as members of cascaded C kernels (opfuse/backends/c/cascade_pool.py):
conv -> pool (-> conv) chains stream rows through ring buffers, match onnxruntime, and the arena
is analyze's peak with cascades. Padding, strides 1 and 2, odd sizes, count_include_pad and band
heights of 1 and 3 rows."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.analysis import analyze
from opfuse.backends.c import emit_c
from opfuse.pipeline import compile_model
from tests.helpers.c_cascade import arena_of, check_against_onnxruntime
from tests.helpers.cascade import streaming
from tests.helpers.sanitize import sanitized_run_matches

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

# (pool, kernel, stride, pad, count_include_pad, input size, band rows)
CASES = {
    "max_2x2_s2": ("MaxPool", 2, 2, 0, 0, 20, 1),
    "max_3x3_s2_pad1_odd": ("MaxPool", 3, 2, 1, 0, 23, 3),
    "avg_3x3_s1_pad1_exclude_pad": ("AveragePool", 3, 1, 1, 0, 17, 1),
    "avg_3x3_s2_pad1_include_pad": ("AveragePool", 3, 2, 1, 1, 21, 3),
}


def pool_chain(pool: str, k: int, s: int, pad: int, include: int, size: int,
               channels: int = 8) -> onnx.ModelProto:
    """x -> 3x3 conv -> Relu -> pool -> 3x3 conv -> Relu -> y."""
    rng = np.random.default_rng(0)
    node = helper.make_node
    inits = [
        numpy_helper.from_array(rng.standard_normal((12, channels, 3, 3)).astype(np.float32) * 0.3,
                                "w0"),
        numpy_helper.from_array(rng.standard_normal((8, 12, 3, 3)).astype(np.float32) * 0.3, "w1"),
    ]
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [pad] * 4}
    if pool == "AveragePool":
        attrs["count_include_pad"] = include
    nodes = [node("Conv", ["x", "w0"], ["c0"], pads=[1] * 4, kernel_shape=[3, 3]),
             node("Relu", ["c0"], ["r0"]),
             node(pool, ["r0"], ["p"], **attrs),
             node("Conv", ["p", "w1"], ["c1"], pads=[1] * 4, kernel_shape=[3, 3]),
             node("Relu", ["c1"], ["y"])]
    graph = helper.make_graph(
        nodes, "pool_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def c_refusals(result) -> list[str]:  # noqa: ANN001 (CompileResult)
    """Why the partitioner streamed no cascade through an edge the C backend has no row kernel for."""
    return [d.message for d in result.partition.cascade_decisions if "the C backend" in d.message]


def _target(band: int):
    target = streaming()
    return dataclasses.replace(target, fusion=dataclasses.replace(target.fusion,
                                                                  cascade_band_rows=band))


@pytest.mark.parametrize("case", sorted(CASES))
def test_pool_streams_in_a_cascade_and_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    pool, k, s, pad, include, size, band = CASES[case]
    source = tmp_path / f"{case}.onnx"
    onnx.save(pool_chain(pool, k, s, pad, include, size), source)
    result = compile_model(source, _target(band))
    pooled = [c for c in result.partition.cascades if pool in c.ops]
    assert pooled, f"no cascade holds the {pool}: {[c.ops for c in result.partition.cascades]}"
    emitted = emit_c(result, tmp_path / "c", cascades=True)
    assert emitted.cascades == tuple(c.name for c in result.partition.cascades)
    check_against_onnxruntime(source, tmp_path / "c")
    after = analyze(result, precision="fp32").after
    assert arena_of(tmp_path / "c") == after.plan.peak_bytes


def test_ceil_mode_pool_is_in_no_cascade_with_a_reason(tmp_path: Path) -> None:
    model = pool_chain("MaxPool", 3, 2, 0, 0, 20)
    for n in model.graph.node:
        if n.op_type == "MaxPool":
            n.attribute.append(helper.make_attribute("ceil_mode", 1))
    source = tmp_path / "ceil.onnx"
    onnx.save(model, source)
    result = compile_model(source, streaming())
    # the C has no row kernel for a ceil_mode pool: the partitioner streams no cascade through it
    assert not any("MaxPool" in c.ops for c in result.partition.cascades)
    assert any("ceil_mode" in why for why in c_refusals(result)), c_refusals(result)
    emit_c(result, tmp_path / "c")
    check_against_onnxruntime(source, tmp_path / "c")


def test_pool_cascade_is_sanitizer_clean(tmp_path: Path) -> None:

    source = tmp_path / "avg.onnx"
    onnx.save(pool_chain("AveragePool", 3, 2, 1, 1, 21), source)
    folder = tmp_path / "c"
    emitted = emit_c(compile_model(source, _target(3)), folder, cascades=True)
    assert emitted.cascades
    sanitized_run_matches(folder, source)
