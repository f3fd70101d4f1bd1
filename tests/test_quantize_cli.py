"""`opfuse quantize --keep-float` and `opfuse compile --emit c --precision int8 --calibration`
(docs/quantize.md): a kept kernel is a float island the int8 C computes bit-exactly against
onnxruntime's run of the QDQ model, keeping the worst kernel float raises the SQNR where its
weights do not survive int8, and the one-step compile writes the C with its QDQ model and checks it
against the float model; bad options and data are one line with exit status 2."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper


def _outlier_model() -> onnx.ModelProto:
    """stem (Conv 3x3 -> Relu) -> head (Conv 1x1). Every output channel of the head has one weight
    of 40 on the stem's channel 0, which the stem keeps tiny, and small weights elsewhere: per
    channel int8 the small weights round to 0, so the head's int8 output is nearly 0 dB."""
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3
    w0[0] *= 0.001
    w1 = (rng.standard_normal((6, 8, 1, 1)) * 0.05).astype(np.float32)
    w1[:, 0, 0, 0] = 40.0
    inits = [numpy_helper.from_array(w0, "w0"), numpy_helper.from_array(np.zeros(8, np.float32),
                                                                         "b0"),
             numpy_helper.from_array(w1, "w1")]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="stem", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="stem_relu"),
             helper.make_node("Conv", ["r0", "w1"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "outlier", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 6, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture()
def outlier(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "outlier.onnx"
    onnx.save(_outlier_model(), src)
    cal = tmp_path / "cal.npz"
    np.savez(cal, x=np.random.default_rng(0).standard_normal((16, 1, 4, 8, 8)).astype(np.float32))
    return src, cal


def _quantize(run_cli, src: Path, cal: Path, out: Path, *extra: str) -> dict:
    code, _, err = run_cli("quantize", str(src), "-o", str(out), "--calibration", str(cal),
                           "--json", str(out.with_suffix(".json")), *extra)
    assert code == 0, err
    return json.loads(out.with_suffix(".json").read_text())


def test_keeping_the_worst_kernel_float(outlier, tmp_path: Path, run_cli) -> None:
    """The report's worst kernel kept float: its Conv reads its float weights in the QDQ output
    (no DequantizeLinear), Q/DQ still at its output; the output SQNR rises; the int8 C of the
    result, float island included, is 0 steps from onnxruntime's run of it."""
    from opfuse import api
    from opfuse.measure.validate.c_int8 import validate_c_int8

    src, cal = outlier
    plain = _quantize(run_cli, src, cal, tmp_path / "q.onnx")
    worst = plain["kernels"][0]["kernel"]
    kept = _quantize(run_cli, src, cal, tmp_path / "k.onnx", "--keep-float", worst)
    assert kept["kept_float"] == [worst]
    assert kept["outputs"][0]["sqnr_db"] > plain["outputs"][0]["sqnr_db"] + 6, (plain, kept)

    for path, float_head in ((tmp_path / "q.onnx", False), (tmp_path / "k.onnx", True)):
        graph = onnx.load(path).graph
        head = next(n for n in graph.node if n.name == "head")
        inits = {i.name: i for i in graph.initializer}
        assert (head.input[1] in inits and inits[head.input[1]].data_type == TensorProto.FLOAT
                ) is float_head
        producers = {o: n.op_type for n in graph.node for o in n.output}
        assert producers[head.input[0]] == "DequantizeLinear"  # the island reads int8 through DQ
        result = api.compile(str(path), "x86-host")
        report = validate_c_int8(result, trials=3, steps=0)
        assert report.ok, "\n".join(report.notes)
    ops = [k.ops for k in api.compile(str(tmp_path / "k.onnx"), "x86-host").partition.kernels]
    assert ("Conv",) in ops and ("DequantizeLinear",) in ops  # the head runs float in the C


def test_keep_float_takes_a_node_name_and_refuses_an_unknown_one(outlier, tmp_path, run_cli):
    src, cal = outlier
    by_node = _quantize(run_cli, src, cal, tmp_path / "n.onnx", "--keep-float", "head")
    assert by_node["kept_float"] == ["conv"]
    out = tmp_path / "u.onnx"
    code, _, err = run_cli("quantize", str(src), "-o", str(out), "--calibration", str(cal),
                           "--keep-float", "nope\x1b[31m")
    assert code == 2 and err.count("\n") == 1 and "--keep-float nope" in err
    assert "no kernel or node of that name" in err and "\x1b" not in err and not out.exists()


def _table_db(text: str, name: str) -> float:
    return float(re.search(rf"^{re.escape(name)}\s+(-?[\d.]+)\s", text, re.M).group(1))


def test_compile_int8_in_one_step_checks_against_the_float_model(tmp_path, run_cli) -> None:
    """ds_cnn: compile --precision int8 --calibration writes the C and its QDQ model; --check's
    SQNR of the C against the float model is the SQNR of onnxruntime's QDQ run against the float
    model on the same held-out samples (the C is 0 steps from it), and exit status 0."""
    from opfuse import api

    data = np.random.default_rng(0).standard_normal((16, 1, 49, 10)).astype(np.float32)
    np.savez(tmp_path / "cal.npz", input=data)
    out = tmp_path / "c"
    code, text, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(out), "--precision",
                              "int8", "--calibration", str(tmp_path / "cal.npz"), "--check")
    assert code == 0, err
    assert {"model.c", "model.qdq.onnx", "model.json"} <= {p.name for p in out.iterdir()}
    assert "model.qdq.onnx" in json.loads((out / "model.json").read_text())["files"]
    assert "largest difference 0 quantization steps" in text
    checked = text.split("check: the int8 C against the float model", 1)[1]
    float_proto = api.emit(api.compile("ds_cnn", "x86-host"))
    f = ort.InferenceSession(float_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    q = ort.InferenceSession(str(out / "model.qdq.onnx"), opts, providers=["CPUExecutionProvider"])
    held = data[12:]  # the last quarter
    ref = np.concatenate([f.run(None, {"input": x[None]})[0] for x in held]).astype(np.float64)
    got = np.concatenate([q.run(None, {"input": x[None]})[0] for x in held]).astype(np.float64)
    want = 10 * np.log10(np.sum(ref**2) / np.sum((ref - got) ** 2))
    assert _table_db(checked.split("\n", 1)[1], "fc") == pytest.approx(want, abs=0.01)


@pytest.mark.parametrize("args,message", [
    (["--precision", "int8"], "--precision int8 quantizes the float model: give --calibration"),
    (["--calibration", "CAL"], "--calibration quantizes the model: use it with --precision int8"),
    (["--keep-float", "x"], "--keep-float quantizes the model"),
    (["--precision", "int8", "--calibration", "BAD"], "holds NaN (first at sample 2)"),
    (["--precision", "int8", "--calibration", "CAL", "--eval", "SHAPE"],
     "dimension 3 is 9, the model's is 10"),
    (["--precision", "int8", "--calibration", "CAL", "--method", "median"], "--method median"),
    (["--precision", "int8", "--calibration", "CAL", "--keep-float", "nope"], "--keep-float nope"),
])
def test_compile_int8_bad_options_and_data_are_one_line(args, message, tmp_path, run_cli) -> None:
    rng = np.random.default_rng(0)
    good = rng.standard_normal((8, 1, 49, 10)).astype(np.float32)
    bad = good.copy()
    bad[2, 0, 0, 0] = np.nan
    files = {"CAL": good, "BAD": bad, "SHAPE": good[:, :, :, :9]}
    for key, array in files.items():
        np.savez(tmp_path / f"{key}.npz", input=array)
    args = [str(tmp_path / f"{a}.npz") if a in files else a for a in args]
    out = tmp_path / "c"
    code, _, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(out), *args)
    assert code == 2, err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.skipif(any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm")
def test_the_one_step_int8_build_is_bit_exact_on_the_cortex_m7_board(tmp_path, run_cli) -> None:
    """ds_cnn through compile --precision int8 for cortex-m7: the QDQ model written beside the C,
    run as `validate --backend c --emulate` does, is 0 steps from onnxruntime's run of it, in
    fewer instructions and a quarter of the float build's arena."""
    from opfuse import api

    np.savez(tmp_path / "cal.npz", input=np.random.default_rng(0).standard_normal(
        (16, 1, 49, 10)).astype(np.float32))
    out = tmp_path / "c"
    code, _, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(out), "--target",
                           "cortex-m7", "--precision", "int8", "--calibration",
                           str(tmp_path / "cal.npz"))
    assert code == 0, err
    code, text, err = run_cli("validate", str(out / "model.qdq.onnx"), "--backend", "c",
                              "--target", "cortex-m7", "--emulate")
    assert code == 0, err
    assert "largest difference 0 quantization steps" in text
    int8 = api.emulate_c(str(out / "model.qdq.onnx"), "cortex-m7")
    fp32 = api.emulate_c("ds_cnn", "cortex-m7")
    assert int8.footprint.arena * 4 == fp32.footprint.arena
    assert int8.instructions < fp32.instructions


def test_compile_int8_check_exits_1_when_the_c_leaves_its_qdq_model(tmp_path, run_cli,
                                                                    monkeypatch) -> None:
    """--check judges the C against its own QDQ model: beyond 1 step is exit 1 and named (the
    measured C is replaced by one 2 steps off; the figures against the float model stay shown)."""
    from opfuse.measure.validate import c_accuracy as module

    real = module.c_accuracy

    def two_steps_off(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        measured = real(*args, **kwargs)
        measured.steps = {name: 2.0 for name in measured.steps}
        return measured

    monkeypatch.setattr(module, "c_accuracy", two_steps_off)
    np.savez(tmp_path / "cal.npz", input=np.random.default_rng(0).standard_normal(
        (8, 1, 49, 10)).astype(np.float32))
    code, text, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(tmp_path / "c"),
                              "--precision", "int8", "--calibration", str(tmp_path / "cal.npz"),
                              "--check")
    assert code == 1, err
    assert "largest difference 2 quantization steps, beyond the 1 allowed" in text
    assert "  fc: 2 steps" in text and "SQNR dB" in text


def test_each_kernels_own_loss_is_its_inputs_sqnr_minus_its_own(outlier, tmp_path, run_cli):
    """The report's loss column: the stem reads the graph input, whose SQNR is that of x against
    its QuantizeLinear/DequantizeLinear round trip (numpy here); the head reads the stem's output.
    The kernel losing most is the head, whose weights do not survive int8."""
    src, cal = outlier
    data = _quantize(run_cli, src, cal, tmp_path / "q.onnx")
    by_name = {k["kernel"]: k for k in data["kernels"]}
    graph = onnx.load(tmp_path / "q.onnx").graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    q = next(n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    scale, zp = float(inits[q.input[1]]), int(inits[q.input[2]])
    x = np.load(cal)["x"][12:].astype(np.float64)  # the held-out quarter
    xq = (np.clip(np.rint(x / scale) + zp, -128, 127) - zp) * scale
    want = 10 * np.log10(np.sum(x**2) / np.sum((x - xq) ** 2))
    stem, head = by_name["fused_conv_relu"], by_name["conv"]
    assert stem["input_sqnr_db"] == pytest.approx(want, abs=2e-3)
    assert head["input_sqnr_db"] == stem["sqnr_db"]
    for k in (stem, head):
        assert k["loss_db"] == pytest.approx(k["input_sqnr_db"] - k["sqnr_db"], abs=2e-3)
    assert max(data["kernels"], key=lambda k: k["loss_db"])["kernel"] == "conv"
