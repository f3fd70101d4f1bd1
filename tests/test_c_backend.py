"""The C backend: generated code builds warning-free, matches onnxruntime, runs clean under
AddressSanitizer/UndefinedBehaviorSanitizer, and its arena is the memory planner's."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from opfuse.backends.c import emit_c
from opfuse.errors import OpfuseError
from opfuse.measure.run.host import CModel, manifest, run_c, run_executable
from opfuse.measure.validate.c_float import reference, validate_c
from opfuse.models import MODELS
from opfuse.pipeline import compile_model
from tests.helpers.onnx_graphs import float_value, model, weight
from tests.helpers.sanitize import sanitized_run_matches
from tests.helpers.shared import shared_onnx_models

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

SMALL = ("seed_block", "seed_pipeline", "ds_cnn", "tiny_transformer")


def _check(report) -> None:
    for out in report.outputs:
        assert out.max_abs_err <= 1e-4 * out.max_ref + 1e-6, out


@pytest.mark.parametrize("name", list(MODELS))
def test_builtin_fused_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    report = validate_c(name, outdir=tmp_path / "c")
    assert report.ok
    _check(report)


@pytest.mark.parametrize("name", [*SMALL, "mobilenet_v2"])
def test_builtin_unfused_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    report = validate_c(name, fuse=False, outdir=tmp_path / "c")
    assert report.ok
    _check(report)


@pytest.mark.parametrize("path", shared_onnx_models(), ids=lambda p: p.stem)
def test_shared_models_match_onnxruntime(path: Path, tmp_path: Path) -> None:
    try:
        report = validate_c(path, outdir=tmp_path / "c")
    except OpfuseError as exc:  # an uncovered op must be named with its node
        assert re.search(r"no C kernel for op \w+ .*\(node '", str(exc)), exc
        return
    assert report.ok
    _check(report)


@pytest.mark.parametrize("target", ["npu-generic", "cortex-m4", "mobile-gpu"])
def test_other_targets_match(target: str, tmp_path: Path) -> None:
    # npu-generic fuses Conv + BN + ReLU + Conv's MaxPool (anchor_pool): the pool runs in registers
    result = compile_model("seed_pipeline", target)
    report = validate_c(result, outdir=tmp_path / "c")
    assert report.ok
    _check(report)


def test_conv_pool_fusion_is_one_function(tmp_path: Path) -> None:
    result = compile_model("seed_pipeline", "npu-generic")
    assert any("MaxPool" in k.ops and k.ops[0] == "Conv" for k in result.partition.kernels)
    emitted = emit_c(result, tmp_path / "c")
    text = (tmp_path / "c" / "model.c").read_text()
    assert len(re.findall(r"^static void k\d+_", text, re.M)) == emitted.kernels


def test_files_api_and_arena(tmp_path: Path) -> None:
    result = compile_model("seed_block")
    emitted = emit_c(result, tmp_path / "c")
    names = {p.name for p in (tmp_path / "c").iterdir()}
    assert {"model.h", "model.c", "weights.c", "Makefile", "README.md"} <= names
    header = (tmp_path / "c" / "model.h").read_text()
    assert "int opfuse_model_run(const float *input, float *output);" in header
    arena = int(re.search(r"#define OPFUSE_ARENA_BYTES (\d+)", header).group(1))
    assert arena == emitted.arena_bytes == emitted.plan.peak_bytes
    model_c = (tmp_path / "c" / "model.c").read_text()
    assert "malloc" not in model_c
    # fused: one function per kernel; each Conv+Clip stores once (no separate clip pass)
    assert emitted.kernels == len(result.partition.kernels) == 2
    assert model_c.count("static void k") == 2


@pytest.mark.parametrize("name", ["seed_block", "mobilenet_v2", "tiny_transformer"])
def test_arena_equals_analysis(name: str, tmp_path: Path) -> None:
    analysis = pytest.importorskip("opfuse.analysis")
    result = compile_model(name)
    emitted = emit_c(result, tmp_path / "c")
    header = (tmp_path / "c" / "model.h").read_text()
    arena = int(re.search(r"#define OPFUSE_ARENA_BYTES (\d+)", header).group(1))
    # the C backend runs analyze's partition, cascades included (tests/test_c_cascade.py)
    after = analysis.analyze(result, precision="fp32").after
    assert arena == after.to_json()["peak_arena_bytes"] == after.plan.peak_bytes
    assert arena == emitted.arena_bytes
    layers = emit_c(result, tmp_path / "layers", cascades=False)
    assert layers.arena_bytes == analysis.analyze(result, cascades=False).after.plan.peak_bytes


def test_makefile_and_demo(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    folder = tmp_path / "c"
    emit_c(compile_model("ds_cnn"), folder)
    subprocess.run(["make", "-s", "CFLAGS=-O2 -std=c99 -Wall -Wextra -Werror"], cwd=folder,
                   check=True, capture_output=True)
    feeds, ref, _ = reference("ds_cnn")
    got, _ = run_executable(folder / "opfuse_demo", manifest(folder), feeds)
    np.testing.assert_allclose(got["fc"], ref["fc"], atol=1e-4 * np.abs(ref["fc"]).max())


@pytest.mark.parametrize("name", ["seed_block", "tiny_transformer", "pools"])
def test_zero_copy_api_equals_copying_run(name: str, tmp_path: Path) -> None:
    source = name
    if name in CASES:  # several outputs
        source = tmp_path / f"{name}.onnx"
        onnx.save(CASES[name], source)
    emit_c(compile_model(source), tmp_path / "c")
    header = (tmp_path / "c" / "model.h").read_text()
    for decl in ("float *opfuse_model_input(int i);", "float *opfuse_model_output(int i);",
                 "int opfuse_model_invoke(void);"):
        assert decl in header
    assert "opfuse_model_invoke()" in (tmp_path / "c" / "README.md").read_text()
    feeds, ref, _ = reference(source)
    model = CModel(tmp_path / "c")
    zero = model.run(feeds)
    copying = model.run_copying(feeds)
    again = model.run(feeds)  # inputs rewritten: the same result after a copying run
    for key, value in ref.items():
        np.testing.assert_array_equal(zero[key], copying[key])
        np.testing.assert_array_equal(zero[key], again[key])
        np.testing.assert_allclose(zero[key], value, atol=1e-4 * np.abs(value).max() + 1e-6)
    arena = int(re.search(r"#define OPFUSE_ARENA_BYTES (\d+)", header).group(1))
    base = model.ins[0].ctypes.data
    assert all(abs(v.ctypes.data - base) < arena for v in model.outs)  # both in the arena


@pytest.mark.parametrize("name", list(MODELS))
def test_sanitizers(name: str, tmp_path: Path) -> None:
    folder = tmp_path / "c"
    emitted = emit_c(compile_model(name), folder, fuse=name != "mobilenet_v2")
    sanitized_run_matches(folder, name)
    assert emitted.kernels > 0


# ---- single ops and small graphs, built here -------------------------------------------------


_model, _f, _w = model, float_value, weight


def _i(name, values):
    return onnx.numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _fl(name, values):
    return onnx.numpy_helper.from_array(np.array(values, dtype=np.float32), name)


N = helper.make_node
CASES = {
    "conv_transpose": _model(
        [N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1],
           output_padding=[1, 1]), N("Relu", ["y"], ["z"])],
        [_f("x", [1, 4, 5, 6])], [_f("z", None)], [_w("w", [4, 3, 3, 3]), _w("b", [3], 1)]),
    "conv_dilated_1d_pads": _model(
        [N("Conv", ["x", "w"], ["y"], dilations=[2], pads=[3, 1], strides=[2]),
         N("Sigmoid", ["y"], ["z"])],
        [_f("x", [2, 3, 17])], [_f("z", None)], [_w("w", [6, 3, 3])]),
    "conv_same_grouped_hswish": _model(
        [N("Conv", ["x", "w", "b"], ["y"], group=2, auto_pad="SAME_UPPER", strides=[2, 2]),
         N("HardSwish", ["y"], ["z"])],
        [_f("x", [1, 4, 9, 8])], [_f("z", None)], [_w("w", [6, 2, 3, 3]), _w("b", [6], 2)]),
    "conv_line_buffer": _model(  # 4 KB planes: the direct conv's ring buffer of input rows
        [N("Conv", ["x", "w", "b"], ["y"], group=2, pads=[0, 1, 0, 1], strides=[1, 2]),
         N("Relu", ["y"], ["r"]), N("Conv", ["r", "w2"], ["z"], pads=[1, 1, 1, 1])],
        [_f("x", [1, 24, 32, 32])], [_f("z", None)],
        [_w("w", [40, 12, 3, 3]), _w("b", [40], 1), _w("w2", [16, 40, 3, 3], 2)]),
    "conv_pixels": _model(  # few input channels x taps: a vector unit's stem as pixel tiles
        [N("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 2, 1], strides=[1, 3], dilations=[2, 1]),
         N("HardSwish", ["y"], ["h"]), N("Conv", ["h", "w2"], ["z"], pads=[0, 1, 0, 1], strides=[1, 2])],
        [_f("x", [2, 2, 9, 52])], [_f("z", None)],
        [_w("w", [12, 2, 3, 3]), _w("b", [12], 1), _w("w2", [9, 12, 1, 2], 2)]),
    "depthwise_strided_phases": _model(  # dwconv's column-phase band at horizontal stride > 1,
        # onto rows of 14 and 7 columns (narrower ones read in place: test_c_dwconv_narrow.py)
        [N("Conv", ["x", "w", "b"], ["y"], group=5, strides=[2, 3], pads=[0, 2, 1, 1],
           dilations=[1, 2]), N("Conv", ["y", "w2"], ["z"], group=5, strides=[1, 2],
                                 pads=[1, 1, 1, 0])],
        [_f("x", [1, 5, 13, 41])], [_f("z", None)],
        [_w("w", [5, 1, 3, 3]), _w("b", [5], 1), _w("w2", [5, 1, 3, 2], 2)]),
    "resize_nearest": _model(
        [N("Resize", ["x", "", "s"], ["y"], mode="nearest")],
        [_f("x", [1, 2, 3, 4])], [_f("y", None)], [_fl("s", [1, 1, 2, 1.5])]),
    "resize_linear": _model(
        [N("Resize", ["x", "", "", "sz"], ["y"], mode="linear")],
        [_f("x", [1, 2, 5, 4])], [_f("y", None)], [_i("sz", [1, 2, 9, 7])]),
    "resize_linear_align": _model(
        [N("Resize", ["x", "", "s"], ["y"], mode="linear",
           coordinate_transformation_mode="align_corners")],
        [_f("x", [1, 1, 4, 4])], [_f("y", None)], [_fl("s", [1, 1, 2, 2])]),
    "pad_modes": _model(
        [N("Pad", ["x", "p"], ["a"], mode="reflect"), N("Pad", ["a", "p2", "v"], ["b"]),
         N("Pad", ["b", "p"], ["y"], mode="edge")],
        [_f("x", [1, 2, 4, 5])], [_f("y", None)],
        [_i("p", [0, 0, 1, 2, 0, 0, 2, 1]), _i("p2", [0, 1, 1, 0, 0, 0, 0, 2]), _fl("v", [0.5])]),
    "layernorm_softmax_reduce": _model(
        [N("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
         N("Softmax", ["n"], ["s"], axis=1), N("ReduceMean", ["s"], ["y"], axes=[2], keepdims=1)],
        [_f("x", [2, 5, 12])], [_f("y", None)], [_w("g", [12]), _w("b", [12], 1)], opset=17),
    "transpose_concat_slice_split": _model(
        [N("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), N("Concat", ["t", "t"], ["c"], axis=2),
         N("Slice", ["c", "st", "en", "ax", "sp"], ["s"]),
         N("Split", ["s", "sz"], ["y", "z"], axis=1)],
        [_f("x", [2, 3, 4, 5])], [_f("y", None), _f("z", None)],
        [_i("st", [0, 5]), _i("en", [5, -100]), _i("ax", [3, 2]), _i("sp", [1, -2]), _i("sz", [2, 3])]),
    "gemm_runtime_b_and_batched_matmul": _model(
        [N("Gemm", ["a", "b", "c"], ["g"], transB=1, alpha=0.5, beta=2.0),
         N("MatMul", ["x", "y"], ["m"]), N("Add", ["m", "g"], ["o"]), N("Tanh", ["o"], ["z"])],
        [_f("a", [4, 6]), _f("b", [5, 6]), _f("x", [3, 1, 4, 7]), _f("y", [2, 7, 5])],
        [_f("z", None)], [_w("c", [5])]),
    "pools": _model(
        [N("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
           ceil_mode=1), N("MaxPool", ["x"], ["b"], kernel_shape=[2, 3], pads=[0, 1, 1, 1]),
         N("AveragePool", ["x"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
           count_include_pad=1), N("GlobalMaxPool", ["x"], ["d"]),
         N("ReduceMax", ["a"], ["e"], axes=[1, 3], keepdims=0)],
        [_f("x", [1, 3, 7, 8])], [_f(n, None) for n in "bcde"]),
    "squeeze_excite_scale": _model(  # the gate conv's kernel broadcasts its 1x1 result over H, W
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"]),
         N("GlobalAveragePool", ["r"], ["p"]), N("Conv", ["p", "w1", "b1"], ["s"]),
         N("HardSigmoid", ["s"], ["g"], alpha=1 / 6, beta=0.5), N("Mul", ["r", "g"], ["y"])],
        [_f("x", [1, 3, 7, 9])], [_f("y", None)],
        [_w("w", [6, 3, 3, 3]), _w("b", [6], 1), _w("w1", [6, 6, 1, 1], 2), _w("b1", [6], 3)]),
    "conv1x1_runtime_weights": _model(  # weights and bias as inputs: pointwise.py's column
        # tiles reading ONNX's [OC][IC] (4 channels a tile), 63 pixels = 32 + 31
        [N("Conv", ["x", "w", "b"], ["y"]), N("Relu", ["y"], ["z"])],
        [_f("x", [1, 6, 7, 9]), _f("w", [12, 6, 1, 1]), _f("b", [12])], [_f("z", None)], []),
    "broadcast_chain": _model(
        [N("Mul", ["x", "s"], ["a"]), N("Sub", ["a", "x2"], ["b"]), N("LeakyRelu", ["b"], ["c"]),
         N("Div", ["c", "d"], ["e"]), N("Max", ["e", "x"], ["y"])],
        [_f("x", [2, 3, 4]), _f("x2", [3, 1])], [_f("y", None)],
        [_w("s", [4]), _fl("d", [3.0])]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_op_cases(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.onnx"
    onnx.save(CASES[case], path)
    for fuse in (True, False):
        report = validate_c(path, fuse=fuse, outdir=tmp_path / f"c{fuse}")
        assert report.ok, report
        _check(report)


def test_squeeze_excite_scale_joins_the_gate_kernel(tmp_path: Path) -> None:
    """The case above exercises the broadcast epilogue only if the Mul is in the gate's kernel."""
    path = tmp_path / "se.onnx"
    onnx.save(CASES["squeeze_excite_scale"], path)
    result = compile_model(path, "x86-host")
    gate = next(k for k in result.partition.kernels if "HardSigmoid" in k.ops)
    assert gate.ops[0] == "Conv" and gate.ops[-1] == "Mul", gate.ops


def test_uncovered_op_is_named_and_nothing_written(tmp_path: Path) -> None:
    model = _model([N("Relu", ["x"], ["r"]), N("TopK", ["r", "k"], ["y", "i"], axis=-1)],
                   [_f("x", [1, 8])], [_f("y", None)], [_i("k", [2])])
    path = tmp_path / "topk.onnx"
    onnx.save(model, path)
    with pytest.raises(OpfuseError, match=r"no C kernel for op TopK \(node '"):
        emit_c(compile_model(path), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out*"))


def test_run_c_checks_input_size(tmp_path: Path) -> None:
    emit_c(compile_model("ds_cnn"), tmp_path / "c")
    with pytest.raises(OpfuseError, match="input 'input'"):
        run_c(tmp_path / "c", {"input": np.zeros(3, np.float32)})


def test_stack_scratch_is_declared(tmp_path):
    """Every float array a kernel puts on the stack is counted in OPFUSE_STACK_SCRATCH_BYTES:
    memory outside the arena that a deployment has to budget."""
    import re

    from opfuse.api import compile as compile_model_api
    from opfuse.api import emit_c

    emitted = emit_c(compile_model_api("seed_pipeline"), tmp_path / "c")
    header = (tmp_path / "c" / "model.h").read_text()
    declared = int(re.search(r"#define OPFUSE_STACK_SCRATCH_BYTES (\d+)", header).group(1))
    assert declared == emitted.stack_scratch_bytes
    source = (tmp_path / "c" / "model.c").read_text()
    per_kernel = []
    for body in source.split("\nstatic void k")[1:]:
        arrays = re.findall(r"^\s*float\s+\w+((?:\[\d+\])+)", body, flags=re.M)
        per_kernel.append(
            sum(4 * math.prod(int(n) for n in re.findall(r"\d+", dims)) for dims in arrays)
        )
    assert per_kernel and declared == max(per_kernel) > 0


def test_every_uncovered_op_is_named_once_with_its_count(tmp_path: Path) -> None:
    """The refusal lists every op without a C kernel, its count and first node, not only the
    first one met followed by the covered ops' names."""
    model = _model([N("TopK", ["x", "k"], ["t", "i"], axis=-1), N("TopK", ["t", "k"], ["u", "j"], axis=-1),
                    N("Relu", ["u"], ["r"]), N("Mystery", ["r"], ["y"], domain="acme")],
                   [_f("x", [1, 8])], [_f("y", None)], [_i("k", [2])])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    with pytest.raises(OpfuseError) as err:
        emit_c(compile_model(path), tmp_path / "out")
    text = str(err.value)
    assert re.search(r"op TopK x2 \(node '[^']*'\), op Mystery \(domain acme\) \(node '", text), text
    assert "3 of the model's nodes" in text and "Relu" not in text


def test_an_empty_slice_builds_with_its_own_werror_makefile(tmp_path: Path) -> None:
    """A Slice with a negative step from the start has an empty output: its kernel has nothing
    to run, and the C still builds with the Makefile's -Werror (no unused parameters, no arena
    address passed to two restrict parameters) and matches onnxruntime."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    model = _model([N("Relu", ["x"], ["r"]), N("Slice", ["r", "st", "en", "ax", "sp"], ["y"]),
                    N("Relu", ["x"], ["z"])], [_f("x", [1, 8])], [_f("y", None), _f("z", None)],
                   [_i("st", [0]), _i("en", [5]), _i("ax", [1]), _i("sp", [-1])])
    path = tmp_path / "empty.onnx"
    onnx.save(model, path)
    emit_c(compile_model(path), tmp_path / "c")
    subprocess.run(["make", "-s"], cwd=tmp_path / "c", check=True, capture_output=True)
    assert "nothing runs" in (tmp_path / "c" / "model.c").read_text()
    assert validate_c(path, outdir=tmp_path / "v").ok
