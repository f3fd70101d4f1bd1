"""`opfuse quantize` (opfuse/quantize, docs/quantize.md): Q/DQ at the kernels' boundaries, ranges
as onnxruntime's calibrators compute them, TFLite's fixed output scales, the int8 C bit-exact
against the QDQ model's onnxruntime reference, bad calibration data as one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.quant import ops_model
from tests.helpers.shared import SHARED_MODELS, requires_shared


def _samples(name: str, shape: tuple[int, ...], count: int, seed: int = 0):
    from opfuse.quantize.data import Samples

    rng = np.random.default_rng(seed)
    return Samples("test", {name: rng.standard_normal((count, *shape)).astype(np.float32)}, count)


def _init(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}


@pytest.fixture(scope="module")
def ops_quantized(tmp_path_factory):
    from opfuse import api

    path = tmp_path_factory.mktemp("ops") / "ops.onnx"
    onnx.save(ops_model(), path)
    result = api.compile(str(path), "x86-host")
    return path, api.quantize(result, _samples("x", (1, 4, 8, 8), 12),
                              evaluation=_samples("x", (1, 4, 8, 8), 4, seed=1))


def test_minmax_ranges_are_onnxruntimes(ops_quantized, tmp_path: Path) -> None:
    """Every calibrated tensor's range is the one onnxruntime's MinMaxCalibrater finds on the same
    float model and samples."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, create_calibrator

    _, done = ops_quantized
    src = tmp_path / "float.onnx"
    onnx.save(done.float_proto, src)
    feeds = [done.calibration.feeds(i) for i in range(done.calibration.count)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self):  # noqa: ANN201
            return next(self.items, None)

    cal = create_calibrator(str(src), calibrate_method=CalibrationMethod.MinMax,
                            augmented_model_path=str(tmp_path / "aug.onnx"))
    cal.collect_data(Reader())
    theirs = cal.compute_data().data
    compared = 0
    for name in done.placement.calibrated:
        if name in theirs:
            lo, hi = (float(np.asarray(v).reshape(-1)[0]) for v in theirs[name].range_value)
            assert (done.ranges[name].lo, done.ranges[name].hi) == pytest.approx((lo, hi)), name
            compared += 1
    assert compared >= 5


def test_placement_follows_the_kernels_and_tflite_conventions(ops_quantized) -> None:
    _, done = ops_quantized
    plan, proto = done.placement, done.proto
    nodes = {n.name: n for n in done.float_proto.graph.node}
    by_type = {n.op_type: n for n in nodes.values()}
    # the conv's output feeds only LeakyRelu here: quantized; a Conv -> Relu pair is tested below
    softmax, sigmoid = by_type["Softmax"].output[0], by_type["Sigmoid"].output[0]
    assert done.params[sigmoid] == (1 / 256, -128) and sigmoid in plan.fixed  # TFLite's, inside
    assert softmax not in plan.fixed and softmax in plan.bounded  # a graph output (below)
    maxpool = by_type["MaxPool"].output[0]
    assert plan.shared[maxpool] == by_type["LeakyRelu"].output[0]  # moves data: same params
    inits = _init(proto)
    conv = next(n for n in proto.graph.node if n.op_type == "Conv")
    w_dq = next(n for n in proto.graph.node if n.output[0] == conv.input[1])
    b_dq = next(n for n in proto.graph.node if n.output[0] == conv.input[2])
    x_dq = next(n for n in proto.graph.node if n.output[0] == conv.input[0])
    w_q, w_s = inits[w_dq.input[0]], inits[w_dq.input[1]]
    assert w_q.dtype == np.int8 and w_s.shape == (8,) and np.abs(w_q).max() == 127
    w = _init(done.float_proto)[nodes[conv.name].input[1]]
    np.testing.assert_allclose(w_s, np.abs(w).reshape(8, -1).max(axis=1) / 127, rtol=1e-6)
    b_q, b_s = inits[b_dq.input[0]], inits[b_dq.input[1]]
    assert b_q.dtype == np.int32
    np.testing.assert_allclose(b_s, float(inits[x_dq.input[1]]) * w_s, rtol=1e-6)
    for out in done.accuracy.outputs:
        assert isinstance(out["sqnr_db"], float) and out["sqnr_db"] > 15, out


def test_report_sqnr_matches_onnxruntime_runs(ops_quantized) -> None:
    """The report's output SQNR is the float and QDQ models' onnxruntime outputs' SQNR."""
    import onnxruntime as ort

    _, done = ops_quantized
    f = ort.InferenceSession(done.float_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    q = ort.InferenceSession(done.proto.SerializeToString(), opts,
                             providers=["CPUExecutionProvider"])
    ref, got = [], []
    for i in range(done.evaluation.count):
        ref.append(f.run(None, done.evaluation.feeds(i))[0])
        got.append(q.run(None, done.evaluation.feeds(i))[0])
    ref, got = np.concatenate(ref).astype(np.float64), np.concatenate(got).astype(np.float64)
    want = 10 * np.log10(np.sum(ref**2) / np.sum((ref - got) ** 2))
    assert done.accuracy.outputs[0]["sqnr_db"] == pytest.approx(want, abs=1e-3)
    assert done.accuracy.outputs[0]["max_abs_err"] == pytest.approx(np.abs(ref - got).max(), rel=1e-3)
    ranked = [k.sqnr_db for k in done.accuracy.kernels if k.sqnr_db is not None]
    assert ranked == sorted(ranked) and len(ranked) >= 5


def _dead_relu_model() -> onnx.ModelProto:
    """Conv (zero weights, bias -1) -> Relu: a constant 0 activation, then a live conv."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(np.zeros((4, 2, 3, 3), np.float32), "w0"),
             numpy_helper.from_array(-np.ones(4, np.float32), "b0"),
             numpy_helper.from_array(rng.standard_normal((4, 2, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="dead", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="dead_relu"),
             helper.make_node("Conv", ["x", "w1"], ["c1"], name="live"),
             helper.make_node("Add", ["r0", "c1"], ["s"], name="add"),
             helper.make_node("Conv", ["s", "w2"], ["y"], name="last")]
    graph = helper.make_graph(nodes, "dead", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 2, 6, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_constant_activation_is_reported_per_kernel_not_a_zero_scale(tmp_path, run_cli) -> None:
    src = tmp_path / "dead.onnx"
    onnx.save(_dead_relu_model(), src)
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).standard_normal(
        (8, 1, 2, 6, 6)).astype(np.float32))
    code, out, err = run_cli("quantize", str(src), "-o", str(tmp_path / "q.onnx"),
                             "--calibration", str(tmp_path / "cal.npz"), "--json",
                             str(tmp_path / "q.json"))
    assert code == 0, err
    data = json.loads((tmp_path / "q.json").read_text())
    dead = [c for c in data["constant_ranges"] if c["tensor"] == "r0"]
    assert dead and dead[0]["kernel"].startswith("fused_conv_relu") and dead[0]["value"] == 0
    assert "warning: kernel" in out and "collapsed" in out
    scales = [numpy_helper.to_array(i) for i in onnx.load(tmp_path / "q.onnx").graph.initializer
              if i.name.endswith("_scale")]
    assert all(np.all(s > 0) for s in scales)


def test_int8_c_is_bit_exact_against_the_qdq_reference(tmp_path, run_cli) -> None:
    """ds_cnn quantized by the command, compiled by opfuse's int8 C path: the same kernels as the
    float partition (plus the input's Q and output's DQ), and 0 steps from onnxruntime's
    ORT_DISABLE_ALL run of the QDQ model on every element."""
    from opfuse import api
    from opfuse.measure.validate.c_int8 import validate_c_int8

    np.savez(tmp_path / "cal.npz", input=np.random.default_rng(0).standard_normal(
        (12, 1, 49, 10)).astype(np.float32))
    out = tmp_path / "ds_cnn_int8.onnx"
    code, text, err = run_cli("quantize", "ds_cnn", "-o", str(out), "--calibration",
                              str(tmp_path / "cal.npz"))
    assert code == 0, err
    assert "held-out" in text and "SQNR" in text
    float_kernels = [k.name for k in api.compile("ds_cnn", "x86-host").partition.kernels]
    result = api.compile(str(out), "x86-host")
    kernels = [k.name for k in result.partition.kernels]
    assert kernels == ["quantizelinear", *float_kernels, "dequantizelinear"]
    report = validate_c_int8(result, trials=3, steps=0)
    assert report.ok, "\n".join(report.notes)
    assert all(o.max_abs_err == 0 for o in report.outputs)


@pytest.mark.parametrize("case,message", [
    ("missing", "no samples for input 'input' (it has: x)"),
    ("shape", "dimension 2 is 48, the model's is 49"),
    ("few", "too few"),
    ("nan", "holds NaN (first at sample 3)"),
    ("inf", "holds infinity"),
    ("int", "is int32, calibration data must be float"),
    ("constant", "is constant"),
])
def test_bad_calibration_data_is_one_line_exit_2(case, message, tmp_path, run_cli) -> None:
    rng = np.random.default_rng(0)
    good = rng.standard_normal((8, 1, 1, 49, 10)).astype(np.float32)
    arrays = {"missing": {"x": good}, "shape": {"input": good[:, :, :, :48]},
              "few": {"input": good[:2]}, "int": {"input": good.astype(np.int32)},
              "constant": {"input": np.ones_like(good)}}
    if case in ("nan", "inf"):
        bad = good.copy()
        bad[3, 0, 0, 1, 1] = np.nan if case == "nan" else np.inf
        arrays[case] = {"input": bad}
    np.savez(tmp_path / "cal.npz", **arrays[case])
    out = tmp_path / "q.onnx"
    code, _, err = run_cli("quantize", "ds_cnn", "-o", str(out), "--calibration",
                           str(tmp_path / "cal.npz"))
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not out.exists()


def test_the_input_model_is_never_overwritten_and_npy_folders_work(tmp_path, run_cli) -> None:
    src = tmp_path / "ops.onnx"
    onnx.save(ops_model(), src)
    before = src.read_bytes()
    (tmp_path / "cal").mkdir()
    np.save(tmp_path / "cal" / "x.npy", np.random.default_rng(0).standard_normal(
        (8, 4, 8, 8)).astype(np.float32))  # batch 1 left out: one sample per row
    code, _, err = run_cli("quantize", str(src), "-o", str(src), "--calibration",
                           str(tmp_path / "cal"))
    assert code == 2 and "refusing to overwrite" in err and src.read_bytes() == before
    code, out, err = run_cli("quantize", str(src), "-o", str(tmp_path / "q.onnx"),
                             "--calibration", str(tmp_path / "cal"), "--method", "entropy",
                             "--json", "-")
    assert code == 0, err
    data = json.loads(out)
    assert data["method"] == "entropy" and data["evaluation"]["held_out_split"] is True
    assert data["calibration"]["samples"] == 6 and data["evaluation"]["samples"] == 2
    code, _, err = run_cli("quantize", str(tmp_path / "q.onnx"), "-o", str(tmp_path / "q2.onnx"),
                           "--calibration", str(tmp_path / "cal"))
    assert code == 2 and "already quantized" in err


def test_hostile_names_are_escaped_in_the_table(tmp_path, run_cli) -> None:
    model = _dead_relu_model()
    evil = "r0\x1b[31m\nfake"
    for node in model.graph.node:
        node.input[:] = [evil if i == "r0" else i for i in node.input]
        node.output[:] = [evil if o == "r0" else o for o in node.output]
    src = tmp_path / "evil.onnx"
    onnx.save(model, src)
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).standard_normal(
        (8, 1, 2, 6, 6)).astype(np.float32))
    code, out, err = run_cli("quantize", str(src), "-o", str(tmp_path / "q.onnx"),
                             "--calibration", str(tmp_path / "cal.npz"))
    assert code == 0, err
    assert "\x1b" not in out and "\nfake" not in out and "\\x1b" in out


@requires_shared("tflite")
def test_a_float_tflite_quantizes_into_its_own_kernels(tmp_path, run_cli) -> None:
    """The MLPerf Tiny anomaly-detection autoencoder as float .tflite: the QDQ result partitions
    into the float model's ten Gemm kernels (plus Q and DQ)."""
    from opfuse import api

    src = SHARED_MODELS / "tflite" / "ad01_fp32.tflite"
    np.savez(tmp_path / "cal.npz", input_1=np.random.default_rng(0).standard_normal(
        (8, 1, 640)).astype(np.float32))
    out = tmp_path / "ad01_int8.onnx"
    code, _, err = run_cli("quantize", str(src), "-o", str(out), "--calibration",
                           str(tmp_path / "cal.npz"), "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["outputs"][0]["sqnr_db"] > 15
    float_kernels = [k.name for k in api.compile(str(src), "x86-host").partition.kernels]
    kernels = [k.name for k in api.compile(str(out), "x86-host").partition.kernels]
    assert kernels == ["quantizelinear", *float_kernels, "dequantizelinear"]


def test_an_output_softmax_is_bounded_by_its_input_not_tflites_fixed_step(ops_quantized) -> None:
    """The graph output's Softmax gets TFLite's 1/256 halved while the range its int8 input allows
    (top 1 / (1 + (n-1) e^(lo-hi))) still fits, not its calibrated max: on inputs twice as wide
    as the calibration data (so a calibrated max would clip) every output element is at least as
    close to the float model's as with 1/256, and the total error below both (QDQ models run in
    onnxruntime)."""
    from opfuse.quantize.data import Samples
    from opfuse.quantize.placement import insert_qdq, root
    from opfuse.quantize.ranges import Range, asymmetric, run_all, session

    _, done = ops_quantized
    plan = done.placement
    y = done.float_proto.graph.output[0].name
    op, src, n = plan.bounded[y]
    assert (op, n) == ("Softmax", 10) and y not in plan.calibrated and y not in plan.fixed
    s_in, z_in = done.params[root(plan, src)]
    top = 1 / (1 + (n - 1) * np.exp((-128 - z_in) * s_in - (127 - z_in) * s_in))
    scale, zp = done.params[y]  # 1/256 halved while 255 steps still reach the top
    assert zp == -128 and scale < 1 / 256 and 255 * scale >= top > 255 * scale / 2
    assert (256 * scale) in {0.5**j for j in range(1, 25)}
    wide = Samples("x2", {k: 2 * v for k, v in done.evaluation.arrays.items()},
                   done.evaluation.count)
    ref = [r[y] for r in run_all(session(done.float_proto), wide, [y])]
    calibrated_top = max(float(r[y].max()) for r in
                         run_all(session(done.float_proto), done.calibration, [y]))

    def errors(params: tuple[float, int] | None, rounding: bool = False) -> np.ndarray:
        """Per element, |float model - QDQ model| (or, with ``rounding``, |the QDQ model's own
        Softmax before its QuantizeLinear - after its DequantizeLinear|)."""
        proto = done.proto if params is None else insert_qdq(
            done.float_proto, plan, {**done.params, y: params})[0]
        pre = next(n.input[0] for n in proto.graph.node if n.op_type == "QuantizeLinear"
                   and any(d.output[0] == y and d.input[0] == n.output[0]
                           for d in proto.graph.node))
        runs = list(run_all(session(proto, [pre]), wide, [y, pre]))
        base = [r[pre] for r in runs] if rounding else ref
        return np.abs(np.concatenate([(b.astype(np.float64) - r[y]).ravel()
                                      for b, r in zip(base, runs, strict=True)]))

    ours, tflite = errors(None, rounding=True), errors((1 / 256, -128), rounding=True)
    assert np.all(ours <= tflite + 1e-7)  # never rounded further than on TFLite's grid
    assert np.sum(errors(None) ** 2) < np.sum(errors((1 / 256, -128)) ** 2)
    assert np.sum(errors(None) ** 2) < np.sum(
        errors(asymmetric(Range(0.0, calibrated_top, False))) ** 2)


def test_a_bias_too_large_for_its_scale_raises_the_weight_scale_not_saturates(tmp_path) -> None:
    """A channel whose weights BN folding left at ~1e-7 with a bias of 0.3 (as in
    mobilenet_v2_128_0.5.onnx) would need an int32 bias of ~1e10: its weight scale is raised
    until the bias fits, so the QDQ output (onnxruntime) keeps the bias, within 2 output steps
    of the float model."""
    from opfuse import api
    from opfuse.quantize.ranges import run_all, session

    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    w[1] *= 1e-7
    bias = np.array([0.1, 0.3, -0.2, 0.05], np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    src = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), src)
    cal = _samples("x", (1, 2, 6, 6), 8)
    done = api.quantize(api.compile(str(src), "x86-host"), cal, evaluation=cal)
    step = done.params["y"][0]
    for ref, got in zip(run_all(session(done.float_proto), cal, ["y"]),
                        run_all(session(done.proto), cal, ["y"]), strict=True):
        assert np.abs(ref["y"][0, 1] - got["y"][0, 1]).max() <= 2 * step
    b_dq = next(n for n in done.proto.graph.node if n.op_type == "DequantizeLinear"
                and "b_quantized" in n.input[0])
    assert np.abs(_init(done.proto)[b_dq.input[0]]).max() <= 2**30
