"""Models as other toolchains export them (issue 9, items 1 and 2): stale and -1 value_info,
control flow, and custom-domain ops that nothing describes. References are onnxruntime's runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.helpers.exports import CUSTOM_DOMAIN, control_flow, custom_op, paddle_style

UNKNOWN_AFTER_MYSTERY = ["m", "c2", "r2", "y"]


def _save(tmp_path: Path, proto: onnx.ModelProto, name: str) -> str:
    path = tmp_path / f"{name}.onnx"
    onnx.save(proto, path)
    return str(path)


def _one_line_error(code: int, out: str, err: str, *words: str, status: int = 2) -> None:
    assert code == status, (out, err)
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line, err
    for word in words:
        assert word in line, line


# --- stale and -1 value_info ---------------------------------------------------------------

@pytest.mark.parametrize("batch", [-1, "N"], ids=["dim_value-1", "dim_param"])
@pytest.mark.parametrize("bound", [None, "x=2x3x16x16"], ids=["default", "bound"])
def test_stale_value_info_compiles_and_matches_onnxruntime(run_cli, tmp_path, batch, bound):
    src = _save(tmp_path, paddle_style(batch), "paddle")
    shape = ["--input-shape", bound] if bound else []
    code, out, err = run_cli("compile", src, "-o", str(tmp_path / "out.onnx"), *shape, "--check")
    assert code == 0, err
    assert "result: match" in out
    # the optimized model runs at the bound batch in onnxruntime, as the original does
    rows = 2 if bound else 1
    sess = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((rows, 3, 16, 16)).astype(np.float32)
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_stale_value_info_c_matches_onnxruntime(run_cli, tmp_path):
    src = _save(tmp_path, paddle_style(-1), "paddle")
    code, out, err = run_cli("validate", src, "--backend", "c", "--input-shape", "x=2x3x16x16")
    assert code == 0, err
    assert "result: match" in out


def test_inference_still_refuses_a_real_contradiction(run_cli, tmp_path):
    """A bound shape the model cannot take is an error, not silently dropped."""
    src = _save(tmp_path, paddle_style(-1), "paddle")
    code, out, err = run_cli("compile", src, "-o", str(tmp_path / "o.onnx"),
                             "--input-shape", "x=1x3x32x32")
    _one_line_error(code, out, err, "shape inference failed")
    assert not (tmp_path / "o.onnx").exists()


# --- control flow --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["If", "Loop", "Scan"])
def test_control_flow_is_an_opaque_kernel(run_cli, tmp_path, kind):
    src = _save(tmp_path, control_flow(kind), kind)
    code, out, err = run_cli("compile", src, "-o", str(tmp_path / "out.onnx"), "--check")
    assert code == 0, err
    assert "result: match" in out
    code, out, err = run_cli("fusion", src, "--json", "-")
    assert code == 0, err
    data = json.loads(out)
    node = {"If": "branch", "Loop": "loop", "Scan": "scan"}[kind]
    alone = [k for k in data["kernels"] if node in k["nodes"]]
    assert len(alone) == 1 and alone[0]["nodes"] == [node]
    assert any(d["reason"] == "opaque_op" and node in (d["producer"], d["consumer"])
               for d in data["decisions"])
    code, out, err = run_cli("analyze", src, "--json", "-")
    assert code == 0, err
    unknown = json.loads(out)["unknown_bytes_tensors"]
    # a Loop's carried value may change shape, so onnx cannot size it: reported, not invented
    assert (unknown != []) == (kind == "Loop")


# --- custom-domain op without type information ---------------------------------------------

def _as_standard(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The same model with the vendor op replaced by a standard one (Mystery := 2*x), so that
    onnxruntime can run what opfuse emitted around the opaque op."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    two = onnx.numpy_helper.from_array(np.array(2.0, np.float32), "mystery_gain")
    copy.graph.initializer.append(two)
    for node in copy.graph.node:
        if node.domain == CUSTOM_DOMAIN:
            node.op_type, node.domain = "Mul", ""
            node.input.append("mystery_gain")
            del node.attribute[:]
    keep = [o for o in copy.opset_import if o.domain != CUSTOM_DOMAIN]
    del copy.opset_import[:]
    copy.opset_import.extend(keep)
    return copy


def test_custom_op_compiles_and_emits_onnx(run_cli, tmp_path):
    src = _save(tmp_path, custom_op(), "custom")
    out_path = tmp_path / "out.onnx"
    code, out, err = run_cli("compile", src, "-o", str(out_path))
    assert code == 0, err
    emitted = onnx.load(out_path)
    onnx.checker.check_model(emitted)
    mystery = [n for n in emitted.graph.node if n.op_type == "Mystery"]
    assert len(mystery) == 1 and mystery[0].domain == CUSTOM_DOMAIN
    assert [a.name for a in mystery[0].attribute] == ["gain"]
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    run = [ort.InferenceSession(_as_standard(m).SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
           for m in (onnx.load(src), emitted)]
    np.testing.assert_allclose(run[1], run[0], rtol=1e-5, atol=1e-5)


def test_custom_op_fusion_reason(run_cli, tmp_path):
    src = _save(tmp_path, custom_op(), "custom")
    code, out, err = run_cli("fusion", src, "--json", "-")
    assert code == 0, err
    data = json.loads(out)
    assert ["mystery"] in [k["nodes"] for k in data["kernels"]]
    assert {d["reason"] for d in data["decisions"] if "mystery" in (d["producer"], d["consumer"])} \
        == {"opaque_op"}


def _analyze(run_cli, src: str, *extra: str) -> dict:
    code, out, err = run_cli("analyze", src, "--json", "-", *extra)
    assert code == 0, err
    return json.loads(out)


def test_custom_op_sizes_are_reported_unknown(run_cli, tmp_path):
    unknown = _analyze(run_cli, _save(tmp_path, custom_op(), "custom"))
    known = _analyze(run_cli, _save(tmp_path, custom_op(value_info=True), "custom_vi"))
    assert unknown["unknown_bytes_tensors"] == UNKNOWN_AFTER_MYSTERY
    assert unknown["after"]["unknown_bytes_tensors"] == UNKNOWN_AFTER_MYSTERY
    assert "peak_arena_bytes" in unknown["after"]["lower_bounds"]
    assert "traffic_bytes" in unknown["after"]["lower_bounds"]
    assert known["unknown_bytes_tensors"] == [] and known["after"]["lower_bounds"] == []
    # nothing invented: the unknown side counts less than the model that states the sizes
    for key in ("traffic_bytes", "activation_bytes", "peak_arena_bytes"):
        assert unknown["after"][key] < known["after"][key], key
    # and the known side's activation traffic is what the shapes say: every fp32 tensor
    # crossing a kernel boundary, read or written
    sizes = {"x": 3 * 256, "r1": 8 * 256, "m": 8 * 256, "r2": 8 * 256, "y": 8 * 256}
    reads = {"fused_conv_relu": ["x"], "mystery": ["r1"], "fused_conv_relu_2": ["m"],
             "add": ["r2", "m"]}
    writes = {"fused_conv_relu": ["r1"], "mystery": ["m"], "fused_conv_relu_2": ["r2"],
              "add": ["y"]}
    names = [k["name"] for k in known["kernels"]]
    if sorted(names) == sorted(reads):
        expect = 4 * sum(sizes[v] for k in names for v in reads[k] + writes[k])
        assert known["after"]["activation_bytes"] == expect


def test_missing_shape_from_the_command_line(run_cli, tmp_path):
    known = _analyze(run_cli, _save(tmp_path, custom_op(value_info=True), "custom_vi"))
    given = _analyze(run_cli, _save(tmp_path, custom_op(), "custom"),
                     "--input-shape", "m=1x8x16x16")
    assert given["unknown_bytes_tensors"] == []
    assert given["after"] == known["after"]


def test_custom_op_console_says_lower_bound(run_cli, tmp_path):
    code, out, err = run_cli("analyze", _save(tmp_path, custom_op(), "custom"))
    assert code == 0, err
    assert "unknown size: 4 tensors (m, c2, r2, y)" in out and "lower bounds" in out


def test_custom_op_to_c_is_one_line_naming_the_op(run_cli, tmp_path):
    src = _save(tmp_path, custom_op(), "custom")
    code, out, err = run_cli("compile", src, "--emit", "c", "-o", str(tmp_path / "c"))
    # an op without a C kernel is not the user's mistake: "not supported", exit 3
    _one_line_error(code, out, err, "not supported", "Mystery", "mystery", status=3)
    assert not (tmp_path / "c").exists()


def test_shape_for_an_unknown_name_is_refused(run_cli, tmp_path):
    src = _save(tmp_path, custom_op(), "custom")
    code, out, err = run_cli("analyze", src, "--input-shape", "nope=1x2")
    _one_line_error(code, out, err, "nope", "not a graph input")
