"""int8 C as a whole model: fused kernels equal the unfused ops and TFLite Micro bit for bit, the
int8 API in model.h, strict warnings and sanitizers, and ONNX rounding against onnxruntime."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.qgraphs import QGraph, compile_ir, run_c

RUNS = 20


def _residual(rounding: str = "tflite"):
    """x -> Conv 3x3 (+ bias) -> Relu -> Add(., x) -> y, NCHW int8 (the IR of a residual block)."""
    rng = np.random.default_rng(5)
    c, h, w = 6, 7, 9
    sx, zx, sc, zc, sy, zy = 0.05, -3, 0.08, -20, 0.1, 4
    ws = rng.uniform(0.003, 0.02, c).astype(np.float32)
    wt = rng.integers(-127, 128, (c, c, 3, 3)).astype(np.int8)
    bias = rng.integers(-2000, 2000, c).astype(np.int32)
    g = QGraph(rounding)
    x = g.input((1, c, h, w), sx, zx)
    t = g.op("Conv", [x, g.const(wt, ws, 0, axis=0), g.const(bias, sx * ws, 0, axis=0)],
             (1, c, h, w), sc, zc, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    t = g.op("Relu", [t], (1, c, h, w), sc, zc)
    y = g.op("Add", [t, x], (1, c, h, w), sy, zy)
    return g.model(y), (wt, ws, bias, sx, zx, sc, zc, sy, zy)


def _feeds(model, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    v = model.graph.inputs[0]
    return [{v.name: rng.integers(-128, 128, tuple(v.shape)).astype(np.int8)}
            for _ in range(RUNS)]


def test_residual_fused_equals_unfused_and_tflite_micro() -> None:
    pytest.importorskip("tflite_micro")
    from tests.helpers import qgraphs as q
    from tests.helpers import tflite_builder as tb

    model, (wt, ws, bias, sx, zx, sc, zc, sy, zy) = _residual()
    result = compile_ir(model)
    assert len(result.partition.kernels) < 3, "the partition should fuse Conv + Relu + Add"
    feeds = _feeds(model)
    fused = run_c(model, feeds, fuse=True)
    unfused = run_c(model, feeds, fuse=False)
    out = model.graph.outputs[0].name
    c, h, w = wt.shape[0], 7, 9
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, c), np.int8, sx, zx)
    wi = q.tensor(m, (c, 3, 3, c), np.int8, ws, 0, 0, wt.transpose(0, 2, 3, 1))
    bi = q.tensor(m, (c,), np.int32, sx * ws, 0, 0, bias)
    t = q.tensor(m, (1, h, w, c), np.int8, sc, zc)
    y = q.tensor(m, (1, h, w, c), np.int8, sy, zy)
    q.add_op(m, "CONV_2D", [x, wi, bi], [t], q.conv_options((1, 1), "SAME", "relu"))
    q.add_op(m, "ADD", [t, x], [y], q.add_options())
    m.inputs, m.outputs = [x], [y]
    name = model.graph.inputs[0].name
    ref = q.run_tflm(m.build(), [[f[name].transpose(0, 2, 3, 1)] for f in feeds])
    for f, u, r in zip(fused, unfused, ref, strict=True):
        assert np.array_equal(f[out], u[out])
        assert np.array_equal(f[out].transpose(0, 2, 3, 1), r[0])


def test_model_h_api_and_arena(tmp_path: Path) -> None:
    from opfuse.backends.c import emit_c

    model, _ = _residual()
    result = compile_ir(model)
    emitted = emit_c(result, tmp_path / "m")
    header = (tmp_path / "m" / "model.h").read_text()
    assert "int opfuse_model_run(const int8_t *input, int8_t *output);" in header
    assert "int8_t *opfuse_model_input(int i);" in header
    assert "int8_t *opfuse_model_output(int i);" in header
    assert "#define OPFUSE_INPUT0_SCALE 0.05" in header
    assert "#define OPFUSE_INPUT0_ZERO_POINT -3" in header
    assert "#define OPFUSE_OUTPUT0_ZERO_POINT 4" in header
    assert f"#define OPFUSE_ARENA_BYTES {emitted.plan.peak_bytes}" in header
    # int8 activations: the arena holds bytes, not floats
    assert emitted.arena_bytes <= 2 * 16 * -(-6 * 7 * 9 // 16) + 64
    source = (tmp_path / "m" / "model.c").read_text()
    assert source.count("static inline int32_t opfuse_requant(") == 1


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_int8_c_is_warning_free_and_sanitizer_clean(tmp_path: Path) -> None:
    from opfuse.backends.c import emit_c
    from opfuse.measure.run.host import build_executable, manifest, run_executable

    model, _ = _residual()
    feeds = _feeds(model, 3)
    folder = tmp_path / "m"
    emit_c(compile_ir(model), folder)
    exe = build_executable(folder, ["-O1", "-g", "-fsanitize=address,undefined",
                                    "-fno-sanitize-recover=undefined"], name="asan")
    info = manifest(folder)
    want = run_c(model, feeds[:3])
    for f, ref in zip(feeds[:3], want, strict=True):
        got, proc = run_executable(exe, info, f, env={"ASAN_OPTIONS": "detect_leaks=0"})
        assert "runtime error" not in proc.stderr
        for k, v in ref.items():
            assert np.array_equal(got[k], v)


def _qdq_residual_onnx(model_ir, params) -> bytes:
    """The same residual block as QDQ ONNX (DequantizeLinear -> float ops -> QuantizeLinear)."""
    from onnx import TensorProto, helper, numpy_helper

    wt, ws, bias, sx, zx, sc, zc, sy, zy = params
    c = wt.shape[0]
    h, w = 7, 9

    def sz(name, s, z):
        return [numpy_helper.from_array(np.asarray(s, np.float32), f"{name}_s"),
                numpy_helper.from_array(np.asarray(z, np.int8), f"{name}_z")]

    inits = [numpy_helper.from_array(wt, "wq"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(np.zeros(c, np.int8), "wz"),
             numpy_helper.from_array(bias, "bq"),
             numpy_helper.from_array((np.float32(sx) * ws).astype(np.float32), "bs"),
             numpy_helper.from_array(np.zeros(c, np.int32), "bz"),
             *sz("x", sx, zx), *sz("c", sc, zc), *sz("y", sy, zy)]
    n = helper.make_node
    nodes = [
        n("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
        n("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=0),
        n("DequantizeLinear", ["bq", "bs", "bz"], ["bf"], axis=0),
        n("Conv", ["xf", "wf", "bf"], ["cf"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Relu", ["cf"], ["rf"]),
        n("QuantizeLinear", ["rf", "c_s", "c_z"], ["cq"]),
        n("DequantizeLinear", ["cq", "c_s", "c_z"], ["cdf"]),
        n("Add", ["cdf", "xf"], ["af"]),
        n("QuantizeLinear", ["af", "y_s", "y_z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, c, h, w])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_onnx_rounding_within_one_step_of_onnxruntime() -> None:
    import onnxruntime as ort

    model, params = _residual("onnx")
    feeds = _feeds(model, 7)
    got = run_c(model, feeds)
    sess = ort.InferenceSession(_qdq_residual_onnx(model, params),
                                providers=["CPUExecutionProvider"])
    name, out = model.graph.inputs[0].name, model.graph.outputs[0].name
    worst = 0
    for f, g in zip(feeds, got, strict=True):
        ref = sess.run(None, {"x": f[name]})[0]
        worst = max(worst, int(np.max(np.abs(ref.astype(int) - g[out].astype(int)))))
    assert worst <= 1, f"largest difference {worst} quantization steps"


def test_build_dir_is_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the runner leaves no files behind when given no folder (a temporary directory of this
    # test's own, so another worker's builds in the shared one cannot race it)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model, _ = _residual()
    run_c(model, _feeds(model)[:1])
    assert not list(tmp_path.glob("opfuse-q-*"))


def _residual_tflite(params) -> bytes:
    from tests.helpers import qgraphs as q
    from tests.helpers import tflite_builder as tb

    wt, ws, bias, sx, zx, sc, zc, sy, zy = params
    c, h, w = wt.shape[0], 7, 9
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, c), np.int8, sx, zx)
    wi = q.tensor(m, (c, 3, 3, c), np.int8, ws, 0, 0, wt.transpose(0, 2, 3, 1))
    bi = q.tensor(m, (c,), np.int32, sx * ws, 0, 0, bias)
    t = q.tensor(m, (1, h, w, c), np.int8, sc, zc)
    y = q.tensor(m, (1, h, w, c), np.int8, sy, zy)
    q.add_op(m, "CONV_2D", [x, wi, bi], [t], q.conv_options((1, 1), "SAME", "relu"))
    q.add_op(m, "ADD", [t, x], [y], q.add_options())
    m.inputs, m.outputs = [x], [y]
    return m.build()


class _NchwReference:
    """TFLite Micro on an NHWC file, seen from an NCHW IR graph (names and layout mapped)."""

    name = "TFLite Micro"

    def __init__(self, path: Path, model) -> None:
        from opfuse.measure.validate.tflite_reference import TensorSpec, TfliteReference

        self.ref = TfliteReference(path)
        self.inputs = tuple(TensorSpec(v.name, tuple(v.shape), np.dtype(np.int8), 1.0)
                            for v in model.graph.inputs)
        self.outputs = tuple(TensorSpec(v.name, tuple(v.shape), np.dtype(np.int8), 1.0)
                             for v in model.graph.outputs)

    def run(self, feeds):
        x = feeds[self.inputs[0].name].transpose(0, 2, 3, 1)
        out = self.ref.run({self.ref.inputs[0].name: x})[self.ref.outputs[0].name]
        return {self.outputs[0].name: np.ascontiguousarray(out.transpose(0, 3, 1, 2))}

    def random_inputs(self, seed: int):
        rng = np.random.default_rng(seed)
        return {s.name: rng.integers(-128, 128, s.shape).astype(np.int8) for s in self.inputs}


@pytest.mark.parametrize("broken", [False, True])
def test_validate_int8_counts_differences_in_steps(tmp_path: Path, broken: bool) -> None:
    pytest.importorskip("tflite_micro")
    from opfuse.measure.validate.c_int8 import validate_c_int8

    model, params = _residual()
    if broken:  # a reference whose output zero point is one step off
        params = (*params[:-1], params[-1] + 1)
    path = tmp_path / "residual.tflite"
    path.write_bytes(_residual_tflite(params))
    report = validate_c_int8(compile_ir(model), reference=_NchwReference(path, model),
                             trials=5, steps=0)
    check = report.outputs[0]
    if broken:
        assert not report.ok and check.max_abs_err == 1
        assert any(f"of {5 * 6 * 7 * 9} elements differ" in n and not n.startswith("0 ")
                   for n in report.notes)
    else:
        assert report.ok and check.max_abs_err == 0
        assert any(f"0 of {5 * 6 * 7 * 9} elements differ" in n for n in report.notes)
