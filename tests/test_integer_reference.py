"""The integer reference of QDQ ONNX (opfuse/measure/validate/integer_reference.py): each
DQ -> Conv/Gemm -> [Relu/Clip] -> Q group computed as QLinearConv defines it. Checked against the
ONNX project's own evaluator of QLinearConv / QLinearMatMul (onnx.reference: numpy integer
convolution, no float sum), against exact rational arithmetic on a value a float32 sum rounds
the wrong way, and the int8 C of a model opfuse quantized against it (validate's reference)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from opfuse.measure.validate.integer_reference import integer_reference


def _run(proto: onnx.ModelProto, feeds: dict) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _conv_models(rng, clamp: str | None, zx: int, cin: int = 6, cout: int = 5):
    """(the QDQ model, the same group as one QLinearConv, a float-reading clamp's bounds)."""
    w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    sw = (rng.random(cout) * 0.02 + 0.001).astype(np.float32)
    sx, sy = np.float32(0.05), np.float32(0.3)
    bias = rng.integers(-3000, 3000, cout).astype(np.int32)
    zy = np.int8(-20)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(sw, "sw"),
             numpy_helper.from_array(np.zeros(cout, np.int8), "zw"),
             numpy_helper.from_array(np.asarray(sx), "sx"),
             numpy_helper.from_array(np.asarray(np.int8(zx)), "zx"),
             numpy_helper.from_array(bias, "b"), numpy_helper.from_array(sx * sw, "sb"),
             numpy_helper.from_array(np.zeros(cout, np.int32), "zb"),
             numpy_helper.from_array(np.asarray(sy), "sy"),
             numpy_helper.from_array(np.asarray(zy), "zy"),
             numpy_helper.from_array(np.float32(0.0), "lo"),
             numpy_helper.from_array(np.float32(6.0), "hi")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    y = "c"
    if clamp == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        y = "r"
    elif clamp == "Clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["r"]))
        y = "r"
    nodes.append(helper.make_node("QuantizeLinear", [y, "sy", "zy"], ["y"]))
    io = ([helper.make_tensor_value_info("x", TensorProto.INT8, [1, cin, 7, 7])],
          [helper.make_tensor_value_info("y", TensorProto.INT8, [1, cout, 7, 7])])
    qdq = helper.make_model(helper.make_graph(nodes, "qdq", *io, inits),
                            opset_imports=[helper.make_opsetid("", 13)])
    qlinear = helper.make_model(helper.make_graph(
        [helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"],
                          ["y"], pads=[1, 1, 1, 1])], "qlinear", *io, inits),
        opset_imports=[helper.make_opsetid("", 13)])
    return qdq, qlinear


@pytest.mark.parametrize("clamp", [None, "Relu", "Clip"])
@pytest.mark.parametrize("zx", [0, -7])
def test_a_conv_group_is_onnx_s_own_qlinearconv(clamp, zx) -> None:
    rng = np.random.default_rng(3)
    qdq, qlinear = _conv_models(rng, clamp, zx)
    rewrite = integer_reference(qdq)
    assert rewrite.rewritten == ["conv"] and not rewrite.kept
    evaluator = ReferenceEvaluator(qlinear)
    for k in range(5):
        x = np.random.default_rng(k).integers(-128, 128, (1, 6, 7, 7)).astype(np.int8)
        want = evaluator.run(None, {"x": x})[0]
        if clamp is not None:  # QLinearConv has no activation: the clamp is on its integers
            q_lo = -20  # zero point: Relu's 0
            q_hi = 127 if clamp == "Relu" else int(np.rint(np.float32(6) / np.float32(0.3))) - 20
            want = np.clip(want, q_lo, q_hi)
        np.testing.assert_array_equal(_run(rewrite.proto, {"x": x}), want)


def test_a_gemm_group_is_onnx_s_own_qlinearmatmul_plus_bias() -> None:
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (12, 4)).astype(np.int8)  # K x N (Gemm without transB)
    sw = (rng.random(4) * 0.01 + 0.001).astype(np.float32)
    sx, sy = np.float32(0.04), np.float32(0.2)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(sw, "sw"),
             numpy_helper.from_array(np.zeros(4, np.int8), "zw"),
             numpy_helper.from_array(np.asarray(sx), "sx"),
             numpy_helper.from_array(np.asarray(np.int8(3)), "zx"),
             numpy_helper.from_array(np.asarray(sy), "sy"),
             numpy_helper.from_array(np.asarray(np.int8(5)), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=1),
             helper.make_node("Gemm", ["xf", "wf"], ["g"], name="gemm"),
             helper.make_node("QuantizeLinear", ["g", "sy", "zy"], ["y"])]
    io = ([helper.make_tensor_value_info("x", TensorProto.INT8, [3, 12])],
          [helper.make_tensor_value_info("y", TensorProto.INT8, [3, 4])])
    qdq = helper.make_model(helper.make_graph(nodes, "g", *io, inits),
                            opset_imports=[helper.make_opsetid("", 13)])
    rewrite = integer_reference(qdq)
    assert rewrite.rewritten == ["gemm"]
    x = rng.integers(-128, 128, (3, 12)).astype(np.int8)
    # QLinearMatMul takes one output scale per column only through its b scale: per column
    # separately, the ONNX evaluator's QLinearMatMul on that column
    got = _run(rewrite.proto, {"x": x})
    for c in range(4):
        ql = helper.make_model(helper.make_graph(
            [helper.make_node("QLinearMatMul", ["x", "sx", "zx", "wc", "swc", "zwc", "sy", "zy"],
                              ["y"])], "m", [helper.make_tensor_value_info(
                                  "x", TensorProto.INT8, [3, 12])],
            [helper.make_tensor_value_info("y", TensorProto.INT8, [3, 1])],
            [*inits, numpy_helper.from_array(w[:, c:c + 1], "wc"),
             numpy_helper.from_array(np.asarray(sw[c]), "swc"),
             numpy_helper.from_array(np.asarray(np.int8(0)), "zwc")]),
            opset_imports=[helper.make_opsetid("", 13)])
        want = ReferenceEvaluator(ql).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got[:, c:c + 1], want)


def test_validate_judges_the_c_against_it_and_notes_the_float_run(tmp_path) -> None:
    """A QDQ conv model's int8 C: 0 steps from the integer reference, which the report names,
    with the plain float32 run of the QDQ model as an informative note."""
    from opfuse import api

    qdq, _ = _conv_models(np.random.default_rng(3), "Relu", -7)
    path = tmp_path / "conv.onnx"
    onnx.save(qdq, path)
    report = api.validate_c(str(path), "x86-host")
    assert report.ok and report.outputs[0].max_abs_err == 0
    assert "QLinearConv/QLinearMatMul define it: integer sums" in report.notes[0]
    assert any("from the QDQ model run as written" in n for n in report.notes)
