"""int8 C of QDQ ONNX (written by onnxruntime's quantize_static, per-channel) against a reference
that does not depend on the CPU: onnxruntime at ORT_DISABLE_ALL, which runs every QuantizeLinear
and DequantizeLinear around the float op (the ONNX definition): within one quantization step on
every element (docs/architecture.md, "int8 in the IR": rounding "onnx"). ORT_ENABLE_ALL's QLinear
kernels differ between CPUs (up to 55 steps on AVX2 without VNNI); their distance is printed as an
informative note, never asserted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.helpers.qdq_cases import CASES
from tests.helpers.quant import quantize


@pytest.mark.parametrize("case", sorted(CASES))
def test_qdq_op_within_one_step_of_onnxruntime(case: str, tmp_path: Path) -> None:
    from opfuse.api import compile
    from opfuse.measure.validate.c_int8 import validate_c_int8

    path = quantize(CASES[case](), tmp_path, "qdq", per_channel=True, samples=8)
    report = validate_c_int8(compile(path), trials=20, steps=1)
    assert report.ok, "\n".join(report.notes)
    assert all(o.max_abs_err <= 1 for o in report.outputs)
    assert any("reference: onnxruntime (ORT_DISABLE_ALL" in n for n in report.notes), report.notes
    print(case, *[n for n in report.notes if n.startswith("informative:")], sep="\n  ")


@pytest.mark.parametrize("case", ["conv", "depthwise_s2", "gemm", "residual_add"])
def test_the_reference_is_the_onnx_definition(case: str, tmp_path: Path) -> None:
    """The asserted reference (onnxruntime, ORT_DISABLE_ALL) against the ONNX definition evaluated
    by onnx's own ReferenceEvaluator (numpy): the quantized outputs agree within one step (float
    accumulation order only), so the reference is the same on every CPU."""
    from onnx.reference import ReferenceEvaluator

    from opfuse.api import compile
    from opfuse.measure.validate.c_int8 import stepped_reference

    path = quantize(CASES[case](), tmp_path, "qdq", per_channel=True, samples=8)
    ref = stepped_reference(compile(path))
    assert "ORT_DISABLE_ALL" in ref.name
    model = onnx.load(path)
    for opset in model.opset_import:  # onnx's evaluator implements Q/DQ from opset 19 only,
        if opset.domain in ("", "ai.onnx"):  # which reads int8 exactly as opset 13 does
            opset.version = max(opset.version, 19)
    numpy_ref = ReferenceEvaluator(model)
    for seed in range(3):
        feeds = ref.random_inputs(seed)
        got = ref.run(feeds)
        want = dict(zip(numpy_ref.output_names, numpy_ref.run(None, feeds), strict=True))
        for spec in ref.outputs:
            steps = np.abs(got[spec.name].astype(np.float64) - want[spec.name]) / spec.scale
            assert steps.max() <= 1 + 1e-6, (spec.name, steps.max())


@pytest.mark.parametrize("case", ["conv_relu6", "residual_add", "many_ops"])
def test_uint8_activations_within_one_step_of_onnxruntime(case: str, tmp_path: Path) -> None:
    from opfuse.api import compile
    from opfuse.measure.validate.c_int8 import validate_c_int8

    path = quantize(CASES[case](), tmp_path, "qdq", per_channel=True, activation="uint8",
                    samples=8)
    report = validate_c_int8(compile(path), trials=10, steps=1)
    assert report.ok, "\n".join(report.notes)


def test_an_opset_12_qdq_model_onnxruntime_refuses_is_upgraded_not_a_traceback(run_cli, tmp_path):
    """quantize_static writes opset-12 QDQ with per-axis DequantizeLinear, which onnxruntime itself
    cannot load at opset 12 (INVALID_GRAPH). Every reference session validate makes (also the
    informative ORT_ENABLE_ALL one) upgrades the opset as compile --check does, instead of
    letting onnxruntime's exception out."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    w = numpy_helper.from_array(np.random.default_rng(0).normal(size=(4, 3, 3, 3))
                                .astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    onnx.save(model, tmp_path / "f12.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"x": np.random.default_rng(i).normal(size=(1, 3, 8, 8))
                                  .astype(np.float32)} for i in range(8)])

        def get_next(self):  # noqa: ANN202
            return next(self.batches, None)

    quantize_static(str(tmp_path / "f12.onnx"), str(tmp_path / "q12.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    with pytest.raises(Exception, match="INVALID_GRAPH"):  # the premise: onnxruntime refuses it
        ort.InferenceSession(str(tmp_path / "q12.onnx"))
    code, out, err = run_cli("validate", str(tmp_path / "q12.onnx"), "--backend", "c")
    assert code == 0, err
    assert "Traceback" not in err and "result: match" in out
