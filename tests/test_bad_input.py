"""Bad input: one clear line naming the file/node/dim, exit 2, no traceback, nothing half-written."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.cli import assert_clean_error, compile_refused
from tests.helpers.shared import shared_onnx


def _conv_model(input_dims=(1, 3, 8, 8)) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])




def test_empty_file(run_cli, tmp_path):
    model = tmp_path / "empty.onnx"
    model.write_bytes(b"")
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "empty.onnx", "empty")


def test_truncated_protobuf(run_cli, tmp_path):
    data = shared_onnx("mobilenet_v2_128_0.5.onnx").read_bytes()
    model = tmp_path / "truncated.onnx"
    model.write_bytes(data[: len(data) // 3])
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "truncated.onnx")


def test_text_file(run_cli, tmp_path):
    model = tmp_path / "notes.onnx"
    model.write_text("this is a README, not a model\n" * 20)
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "notes.onnx", "not an ONNX model")


def test_cyclic_graph(run_cli, tmp_path):
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["a"], name="first"),
            helper.make_node("Relu", ["a"], ["b"], name="second"),
        ],
        "cycle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
    )
    model = tmp_path / "cycle.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "cycle.onnx", "cycle")
    assert "'first'" in err or "'second'" in err


def test_dynamic_dim_without_input_shape(run_cli, tmp_path):
    model = tmp_path / "dyn.onnx"
    onnx.save(_conv_model((1, 3, "height", 8)), model)
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "dyn.onnx", "'x'", "dim 2", "height", "--input-shape")


def test_dynamic_dim_with_input_shape_compiles(run_cli, tmp_path):
    model = tmp_path / "dyn.onnx"
    onnx.save(_conv_model(("batch", 3, "height", "width")), model)
    out = tmp_path / "out.onnx"
    code, stdout, err = run_cli(
        "compile", str(model), "-o", str(out), "--input-shape", "x=1x3x16x12", "--check"
    )
    assert code == 0, err
    assert "result: match" in stdout and "1x4x16x12" in stdout
    shape = onnx.load(out).graph.input[0].type.tensor_type.shape
    assert [d.dim_value for d in shape.dim] == [1, 3, 16, 12]


def test_bad_input_shape_name(run_cli, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(_conv_model(), model)
    code, err = _compile_with(run_cli, model, tmp_path, "--input-shape", "nope=1x3x8x8")
    assert_clean_error(code, err, "nope", "not a graph input")


def _compile_with(run_cli, model, tmp_path, *extra):
    out = tmp_path / "out.onnx"
    code, _, err = run_cli("compile", str(model), "-o", str(out), *extra)
    assert not out.exists()
    return code, err


def test_external_data_outside_folder(run_cli, tmp_path):
    inner = tmp_path / "model_dir"
    inner.mkdir()
    proto = _conv_model()
    (tmp_path / "secret.bin").write_bytes(np.ones(4 * 3 * 3 * 3, np.float32).tobytes())
    w = proto.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../secret.bin"), ("offset", "0"), ("length", str(4 * 108))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    model = inner / "ext.onnx"
    model.write_bytes(proto.SerializeToString())
    code, err = compile_refused(run_cli, model, inner)
    assert_clean_error(code, err, "ext.onnx", "'w'", "outside the model's folder")


def test_missing_file_and_unknown_target(run_cli, tmp_path):
    code, err = compile_refused(run_cli, tmp_path / "missing.onnx", tmp_path)
    assert_clean_error(code, err, "missing.onnx")
    model = tmp_path / "m.onnx"
    onnx.save(_conv_model(), model)
    code, err = _compile_with(run_cli, model, tmp_path, "--target", "pdp-11")
    assert_clean_error(code, err, "pdp-11", "unknown target")


def test_output_folder_missing(run_cli, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(_conv_model(), model)
    code, _, err = run_cli("compile", str(model), "-o", str(tmp_path / "no" / "out.onnx"))
    assert_clean_error(code, err, "does not exist")


def test_never_overwrites_input(run_cli, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(_conv_model(), model)
    before = model.read_bytes()
    code, _, err = run_cli("compile", str(model), "-o", str(model))
    assert_clean_error(code, err, "m.onnx")
    assert model.read_bytes() == before


def test_unknown_op_is_opaque_not_an_error(run_cli, tmp_path):
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node("Swoosh", ["c"], ["s"], name="swoosh", domain="custom.ops"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
        value_info=[helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 4, 8, 8])],
    )
    model = tmp_path / "custom.onnx"
    onnx.save(
        helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1)],
        ),
        model,
    )
    import json

    code, out, err = run_cli("fusion", str(model), "--target", "mobile-gpu", "--json", "-")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["kernels"]) == 3
    blockers = [d for d in data["decisions"] if d["reason"] == "opaque_op"]
    assert {(d["producer"], d["consumer"]) for d in blockers} == {
        ("conv", "swoosh"),
        ("swoosh", "relu"),
    }
    assert all("Swoosh" in d["message"] for d in blockers)


@pytest.mark.parametrize("argv", [["compile", "nonexistent_model_xyz", "-o", "o.onnx"]])
def test_subprocess_has_no_traceback(argv, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "opfuse", *argv], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("opfuse: error:")
    assert "nonexistent_model_xyz" in proc.stderr


@pytest.mark.parametrize("emit", ["onnx", "c"])
def test_negative_pads_that_make_a_dim_negative_are_refused(run_cli, tmp_path, emit):
    """Pad with negative pads past the input's height: shape inference keeps the -2 and a negative
    size is under every limit; the C once got OPFUSE_OUTPUT0_SIZE -10 and copied (unsigned)-40
    bytes out of its arena. Refused at import, naming the value and the dim."""
    pads = numpy_helper.from_array(np.array([0, 0, -2, 0, 0, 0, -2, 0], np.int64), "pads")
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [pads])
    model = tmp_path / "negpad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = tmp_path / ("out" if emit == "c" else "out.onnx")
    code, _, err = run_cli("compile", str(model), "-o", str(out), "--emit", emit)
    assert_clean_error(code, err, "negpad.onnx", "'y'", "dim 2 is -2")
    assert not out.exists()


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -0.5])
def test_a_quantization_scale_that_is_no_positive_number_is_refused(run_cli, tmp_path, scale):
    """A NaN (or inf, 0, negative) scale was written into model.h as a literal; it is refused at
    import with one line naming the file and the node."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(scale, np.float32), "s"),
         numpy_helper.from_array(np.array(0, np.int8), "z")])
    model = tmp_path / "qscale.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    code, _, err = run_cli("compile", str(model), "--emit", "c", "-o", str(tmp_path / "c"))
    assert_clean_error(code, err, "qscale.onnx", "node 'quant'", "not a finite number > 0")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/hostname", "link.bin"])
def test_validate_checks_external_data_of_both_models(run_cli, tmp_path, location):
    """validate A.onnx B.onnx handed both paths to onnxruntime without the external-data check
    compile and analyze make (an absolute, ../ or symlinked location): guarded by onnxruntime's
    own refusal only. Now the same one line, whichever of the two models names it."""
    inner = tmp_path / "model_dir"
    inner.mkdir()
    (tmp_path / "secret.bin").write_bytes(np.ones(108, np.float32).tobytes())
    (inner / "link.bin").symlink_to(tmp_path / "secret.bin")
    proto = _conv_model()
    w = proto.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(4 * 108))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    bad = inner / "ext.onnx"
    bad.write_bytes(proto.SerializeToString())
    good = inner / "good.onnx"
    onnx.save(_conv_model(), good)
    for a, b in ((good, bad), (bad, good)):
        code, _, err = run_cli("validate", str(a), str(b))
        assert_clean_error(code, err, "ext.onnx", "outside the model's folder")
