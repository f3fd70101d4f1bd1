"""`opfuse quantize --io int8` (docs/quantize.md, "int8 inputs and outputs"): the graph input and
output become int8 with the boundary QuantizeLinear/DequantizeLinear's scale and zero point, the
model computes what the float-I/O one does between them (onnxruntime runs both), its C holds no
float input, and the parameters are printed and in the JSON."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from opfuse import api
from opfuse.quantize.data import Samples
from opfuse.quantize.int8_io import IO_CHOICES, dequantize_output, quantize_feed
from opfuse.quantize.ranges import session


def _samples(count: int, seed: int) -> Samples:
    rng = np.random.default_rng(seed)
    return Samples(f"seed {seed}", {"input": rng.standard_normal((count, 1, 1, 49, 10))
                                    .astype(np.float32)}, count)


@pytest.fixture(scope="module")
def both():
    result = api.compile("ds_cnn", "x86-host")
    return tuple(api.quantize(result, _samples(16, 0), evaluation=_samples(4, 1), io=io)
                 for io in ("float", "int8"))


def test_int8_io_computes_the_float_io_model_between_its_boundary_q_and_dq(both) -> None:
    plain, int8 = both
    graph = int8.proto.graph
    assert [i.type.tensor_type.elem_type for i in graph.input] == [TensorProto.INT8]
    assert [o.type.tensor_type.elem_type for o in graph.output] == [TensorProto.INT8]
    io = {t.name: t for t in int8.io}
    # the reported parameters are those of the float-I/O model's boundary Q and DQ
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in plain.proto.graph.initializer}
    q_in = next(n for n in plain.proto.graph.node if n.input[0] == "input")
    dq_out = next(n for n in plain.proto.graph.node if n.output[0] == "fc")
    assert (io["input"].scale, io["input"].zero_point) == (float(inits[q_in.input[1]]),
                                                           int(inits[q_in.input[2]]))
    assert (io["fc"].scale, io["fc"].zero_point) == (float(inits[dq_out.input[1]]),
                                                     int(inits[dq_out.input[2]]))
    f_sess, i_sess = session(plain.proto), session(int8.proto)
    for k in range(4):
        x = np.random.default_rng(10 + k).standard_normal((1, 1, 49, 10)).astype(np.float32) * 3
        want = f_sess.run(None, {"input": x})[0]
        q = i_sess.run(None, {"input": quantize_feed(x, io["input"])})[0]
        assert q.dtype == np.int8
        np.testing.assert_array_equal(dequantize_output(q, io["fc"]), want)
    assert plain.accuracy.to_json() == int8.accuracy.to_json()


def test_the_int8_io_c_is_bit_exact_and_holds_no_float_input(both, tmp_path) -> None:
    plain, int8 = both
    sizes = {}
    for done in both:
        path = tmp_path / f"{len(sizes)}.onnx"
        onnx.save(done.proto, path)
        report = api.validate_c(str(path), "x86-host")
        assert report.ok and max(o.max_abs_err for o in report.outputs) == 0, report.notes
        emitted = api.emit_c(api.compile(str(path), "x86-host"), tmp_path / f"c{len(sizes)}")
        sizes[done is int8] = emitted
    assert sizes[True].kernels == sizes[False].kernels - 2  # no input Q, no output DQ kernel
    assert sizes[True].arena_bytes <= sizes[False].arena_bytes


def test_the_cli_prints_and_writes_each_io_parameters(tmp_path, run_cli) -> None:
    np.savez(tmp_path / "cal.npz", input=_samples(8, 0).arrays["input"])
    out = tmp_path / "q.onnx"
    code, text, err = run_cli("quantize", "ds_cnn", "-o", str(out), "--calibration",
                              str(tmp_path / "cal.npz"), "--io", "int8", "--json", "-")
    assert code == 0, err
    entries = {e["name"]: e for e in json.loads(text)["io"]}
    model = onnx.load(out)
    assert entries["input"]["dtype"] == entries["fc"]["dtype"] == "int8"
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT8
    dq = next(n for n in model.graph.node if n.input[0] == "input")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    assert entries["input"]["scale"] == float(inits[dq.input[1]])
    assert entries["input"]["zero_point"] == int(inits[dq.input[2]])
    code, text, err = run_cli("quantize", "ds_cnn", "-o", str(tmp_path / "r.onnx"),
                              "--calibration", str(tmp_path / "cal.npz"), "--io", "int8")
    assert code == 0, err
    assert f"input input: int8, scale {entries['input']['scale']!r}, zero point " in text
    assert f"output fc: int8, scale {entries['fc']['scale']!r}" in text
    code, _, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(tmp_path / "c"),
                           "--io", "int8")
    assert code == 2 and err.count("\n") == 1 and "--io quantizes the model" in err


def test_the_cli_choices_are_the_stage_s() -> None:
    from opfuse.cli.quantize import IO_CHOICES as CLI_CHOICES

    assert CLI_CHOICES == IO_CHOICES


def test_compile_int8_io_checks_the_c_on_quantized_samples(tmp_path, run_cli) -> None:
    """compile --precision int8 --io int8 --check: the C is fed each held-out sample quantized with
    the input's parameters and its int8 output dequantized; the SQNR it prints is onnxruntime's
    float-I/O QDQ model's against the float model on the same samples (the same arithmetic)."""
    import re

    import onnxruntime as ort

    data = _samples(16, 0).arrays["input"]
    np.savez(tmp_path / "cal.npz", input=data)
    out = tmp_path / "c"
    code, text, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(out), "--precision",
                              "int8", "--calibration", str(tmp_path / "cal.npz"), "--io", "int8",
                              "--check")
    assert code == 0, err
    assert "largest difference 0 quantization steps" in text.replace("\n", " ").replace("  ", " ")
    model = onnx.load(out / "model.qdq.onnx")
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT8
    plain = api.quantize(api.compile("ds_cnn", "x86-host"), str(tmp_path / "cal.npz"))
    f = ort.InferenceSession(api.emit(api.compile("ds_cnn", "x86-host")).SerializeToString(),
                             providers=["CPUExecutionProvider"])
    q = session(plain.proto)
    held = data[12:].reshape(4, 1, 1, 49, 10)
    ref = np.concatenate([f.run(None, {"input": x})[0] for x in held]).astype(np.float64)
    got = np.concatenate([q.run(None, {"input": x})[0] for x in held]).astype(np.float64)
    want = 10 * np.log10(np.sum(ref**2) / np.sum((ref - got) ** 2))
    checked = text.split("check: the int8 C against the float model", 1)[1]
    row = next(line for line in checked.splitlines() if line.startswith("fc "))
    assert float(re.split(r"\s+", row)[1]) == pytest.approx(want, abs=0.01)


@pytest.mark.skipif(any(__import__("shutil").which(t) is None
                        for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm")
def test_the_int8_io_build_is_bit_exact_on_the_cortex_m7_board(tmp_path, run_cli) -> None:
    """ds_cnn through compile --precision int8 --io int8 for cortex-m7: its QDQ model run as
    `validate --backend c --emulate` does is 0 steps from the integer-sum reference, which the
    report names, in no more arena and fewer instructions than the float-I/O build."""
    np.savez(tmp_path / "cal.npz", input=_samples(16, 0).arrays["input"])
    runs = {}
    for io in ("float", "int8"):
        out = tmp_path / io
        code, _, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(out), "--target",
                               "cortex-m7", "--precision", "int8", "--calibration",
                               str(tmp_path / "cal.npz"), "--io", io)
        assert code == 0, err
        runs[io] = api.emulate_c(str(out / "model.qdq.onnx"), "cortex-m7")
    report = runs["int8"].report
    assert report.ok and report.outputs[0].max_abs_err == 0, report.notes
    assert "integer sums" in report.notes[0]
    assert runs["int8"].footprint.arena <= runs["float"].footprint.arena
    assert runs["int8"].instructions < runs["float"].instructions


def test_an_output_also_read_inside_the_graph_keeps_a_dequantized_copy(tmp_path) -> None:
    """x -> Conv -> y (a graph output) -> Relu -> Conv -> z: with --io int8 both outputs are
    int8, the Relu reads y through a DequantizeLinear of its own, and onnxruntime's run of the
    int8 model, dequantized, is the float-I/O model's."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w1")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["y"], name="c0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["r"], name="r0"),
             helper.make_node("Conv", ["r", "w1"], ["z"], name="c1")]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 6, 6])], [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 6, 6])], inits)
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    result = api.compile(str(path), "x86-host")
    cal = Samples("cal", {"x": rng.standard_normal((12, 1, 3, 6, 6)).astype(np.float32)}, 12)
    plain, int8 = (api.quantize(result, cal, io=io) for io in ("float", "int8"))
    io = {t.name: t for t in int8.io}
    assert [io[n].dtype for n in ("x", "y", "z")] == ["int8"] * 3
    f_sess, i_sess = session(plain.proto), session(int8.proto)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    want = dict(zip(["y", "z"], f_sess.run(["y", "z"], {"x": x}), strict=True))
    got = dict(zip(["y", "z"], i_sess.run(["y", "z"], {"x": quantize_feed(x, io["x"])}),
                   strict=True))
    for name in ("y", "z"):
        np.testing.assert_array_equal(dequantize_output(got[name], io[name]), want[name])


def test_the_page_lists_each_io_parameters(both) -> None:
    import re

    from opfuse.report.quantize_page import render_quantize_page

    plain, int8 = both
    assert 'id="io"' not in render_quantize_page(plain.to_json())
    html = render_quantize_page(int8.to_json())
    rows = re.findall(r'<td class="name">([^<]*)</td><td>int8</td><td class="num scale">([^<]*)'
                      r'</td><td class="num zp">([^<]*)</td>', html)
    assert {(n, float(s), int(z)) for n, s, z in rows} == {
        (t.name, t.scale, t.zero_point) for t in int8.io}
