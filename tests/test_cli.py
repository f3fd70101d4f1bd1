"""The command-line contract end to end: compile every shared model for every target, analyze's JSON,
the report, and analyze's bad input."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.targets import list_targets
from tests.helpers.cli import assert_clean_error as _assert_clean_error
from tests.helpers.shared import shared_onnx_models

TARGETS = list_targets()


@pytest.mark.parametrize("model", shared_onnx_models(), ids=lambda p: p.name)
def test_every_shared_model_compiles_for_every_target(run_cli, tmp_path, model):
    kernel_counts = {}
    for target in TARGETS:
        out = tmp_path / f"{target}.onnx"
        code, _, err = run_cli("compile", str(model), "-o", str(out), "--target", target)
        assert code == 0, err
        emitted = onnx.load(out)
        onnx.checker.check_model(emitted)
        meta = {p.key: p.value for p in emitted.metadata_props}
        assert meta["opfuse.target"] == target
        kernels = json.loads(meta["opfuse.kernels"])
        assert sum(len(k["nodes"]) for k in kernels) == len(emitted.graph.node)
        kernel_counts[target] = len(kernels)
    # The graph is target-independent; check its numerics once, in both flavours.
    for flag in ((), ("--ort",)):
        out = tmp_path / "checked.onnx"
        code, stdout, err = run_cli("compile", str(model), "-o", str(out), "--check", *flag)
        assert code == 0, err + stdout
        assert "result: match" in stdout


def after_lower_bounds(data: dict) -> list:
    return data["after"]["lower_bounds"]


def test_analyze_json_gives_the_seeds_worked_example(run_cli):
    code, out, err = run_cli(
        "analyze", "seed_block", "--precision", "int8", "--activations-only", "--json", "-"
    )
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {
        "model", "target", "precision", "precision_note", "planner", "before", "after", "kernels", "decisions",
        "cascade_decisions", "passes", "unknown_bytes_tensors", "accounting", "canonical", "deployment",
    }
    assert data["unknown_bytes_tensors"] == [] and after_lower_bounds(data) == []
    before, after = data["before"], data["after"]
    assert (before["kernels"], before["traffic_bytes"]) == (6, 1_705_984)
    assert (after["kernels"], after["traffic_bytes"]) == (2, 501_760)
    assert round(1 - after["traffic_bytes"] / before["traffic_bytes"], 2) == 0.71
    assert before["kernels"] / after["kernels"] == 3
    assert [k["name"] for k in data["kernels"]] == ["fused_conv_clip", "fused_conv_clip_2"]
    assert data["passes"]["fuse_bn_into_conv"] == 2


def test_analyze_prints_a_summary_and_writes_html(run_cli, tmp_path):
    page = tmp_path / "report.html"
    code, out, err = run_cli("analyze", "ds_cnn", "--target", "cortex-m4", "--html", str(page))
    assert code == 0, err
    assert "kernels after fusion" in out and "traffic" in out and "peak arena" in out
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "ds_cnn" in text


def test_analyze_bad_input(run_cli, tmp_path):
    code, _, err = run_cli("analyze", "seed_block", "--target", "z80")
    _assert_clean_error(code, err, "unknown target", "z80")
    code, _, err = run_cli("analyze", "seed_block", "--precision", "fp64")
    _assert_clean_error(code, err, "unknown precision", "fp64")
    page = tmp_path / "missing" / "report.html"
    code, _, err = run_cli("analyze", "seed_block", "--html", str(page))
    _assert_clean_error(code, err, "does not exist")
    assert not page.parent.exists()


def test_analyze_model_whose_shapes_cannot_be_static(run_cli, tmp_path):
    # Reshape to a shape computed at run time from a graph input: no static shape exists.
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node("Reshape", ["c", "shape"], ["y"], name="reshape_by_input"),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    model = tmp_path / "runtime_shape.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    # analyze takes it, as onnxruntime does: the sizes it cannot know are listed, not invented
    code, out, err = run_cli("analyze", str(model), "--json", "-")
    assert code == 0, err
    assert json.loads(out)["unknown_bytes_tensors"] == ["y"]
    # a static arena cannot hold it: the C backend refuses in one line naming the node
    code, _, err = run_cli("compile", str(model), "--emit", "c", "-o", str(tmp_path / "c"))
    _assert_clean_error(code, err, "C backend", "reshape_by_input", "dynamic")


def test_compile_emit_c_and_validate_and_bench(run_cli, tmp_path):
    out = tmp_path / "ds_cnn_c"
    code, stdout, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(out), "--check")
    assert code == 0, err
    assert "result: match" in stdout
    assert {"model.h", "model.c", "weights.c", "Makefile", "README.md"} <= {
        p.name for p in out.iterdir()
    }
    code, stdout, err = run_cli("validate", "ds_cnn", "--backend", "c", "--target", "cortex-m7")
    assert code == 0, err
    assert "result: match" in stdout
    code, stdout, err = run_cli("bench", "ds_cnn", "--repeats", "2", "--json", "-")
    assert code == 0, err
    data = json.loads(stdout)
    for key in ("fused_c_s", "unfused_c_s", "ort_all_s", "ort_disabled_s"):
        assert data[key] > 0
    # the kernels and arena of the variants timed, as emit_c counts them (one kernel per node unfused)
    assert 0 < data["fused_kernels"] < data["unfused_kernels"]
    assert data["fused_arena_bytes"] > 0


def test_compile_emit_c_bad_options(run_cli, tmp_path):
    code, _, err = run_cli("compile", "ds_cnn", "--emit", "c", "--ort", "-o", str(tmp_path / "x"))
    _assert_clean_error(code, err, "--ort")
    code, _, err = run_cli("compile", "ds_cnn", "--no-fuse", "-o", str(tmp_path / "x.onnx"))
    _assert_clean_error(code, err, "--no-fuse")
    code, _, err = run_cli("validate", "ds_cnn")
    _assert_clean_error(code, err, "OPTIMIZED")
    assert not list(tmp_path.iterdir())


def test_compile_emit_c_streams_analyze_s_cascades_by_default_and_checks_them(run_cli, tmp_path):
    out = tmp_path / "mnv2"
    code, stdout, err = run_cli("compile", "mobilenet_v2", "--target", "cortex-m7", "--emit", "c",
                                "-o", str(out), "--check")
    assert code == 0, err
    assert re.search(r"generated float32 C \(\d+ cascades?\)", stdout) and "result: match" in stdout
    (line,) = [x for x in stdout.splitlines() if "cascades streamed row by row" in x]
    assert line.startswith("C: 11 cascades") and "cascade_11" in line
    code, js, err = run_cli("analyze", "mobilenet_v2", "--target", "cortex-m7", "--json", "-")
    assert code == 0, err
    after = json.loads(js)["after"]
    assert after["cascades"] > 0
    header = (out / "model.h").read_text()
    assert f"#define OPFUSE_ARENA_BYTES {after['peak_arena_bytes']}" in header
    assert after["peak_arena_bytes"] < after["layer_by_layer_lower_bound_bytes"]
    code, _, err = run_cli("compile", "mobilenet_v2", "--no-cascades", "-o", str(tmp_path / "m.onnx"))
    assert code == 2 and "--emit c only" in err


def test_no_cascades_emits_the_layer_by_layer_c_analyze_no_cascades_reports(run_cli, tmp_path):
    out = tmp_path / "mnv2"
    code, stdout, err = run_cli("compile", "mobilenet_v2", "--target", "cortex-m7", "--emit", "c",
                                "--no-cascades", "-o", str(out))
    assert code == 0, err
    assert "C: layer by layer, no cascades" in stdout
    code, js, err = run_cli("analyze", "mobilenet_v2", "--target", "cortex-m7", "--no-cascades",
                            "--json", "-")
    assert code == 0, err
    after = json.loads(js)["after"]
    assert after["cascades"] == 0
    header = (out / "model.h").read_text()
    assert f"#define OPFUSE_ARENA_BYTES {after['peak_arena_bytes']}" in header
    code, _, err = run_cli("compile", "mobilenet_v2", "--target", "cortex-m7", "--emit", "c",
                           "--cascades", "--no-cascades", "-o", str(tmp_path / "x"))
    assert code == 2 and "contradict" in err
