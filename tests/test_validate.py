"""validate(): the comparison rule, its inputs (random or .npz), and its errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.errors import OpfuseError
from opfuse.measure.validate.ort import (
    ValidationReport,
    compare,
    cosine,
    format_report,
    validate,
)
from tests.helpers.shared import shared_onnx


def _conv_model(scale: float = 1.0, batch: int | str = 1, width: int | str = 6) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32) * scale
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], "conv"),
            helper.make_node("Relu", ["c"], ["y"], "relu"),
            helper.make_node("Cast", ["n"], ["k"], "cast", to=TensorProto.FLOAT),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 6, width]),
            helper.make_tensor_value_info("n", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("k", TensorProto.FLOAT, [2]),
        ],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_identical_models_pass_with_zero_error() -> None:
    report = validate(_conv_model(), _conv_model())
    assert report.ok
    assert [o.name for o in report.outputs] == ["y", "k"]
    for out in report.outputs:
        assert out.max_abs_err == 0.0 and out.max_rel_err == 0.0
        assert out.cosine == pytest.approx(1.0)
    assert report.by_name()["y"].shape == (1, 4, 4, 4)
    text = format_report(report)
    assert "max abs err" in text and "cosine" in text and "result: match" in text


def test_shared_model_against_itself() -> None:
    path = shared_onnx("mobilenet_v2_128_0.5.onnx")  # leading symbolic batch -> 1
    report = validate(path, str(path))
    assert report.ok and report.outputs[0].shape == (1, 2)


def test_perturbed_weight_fails() -> None:
    report = validate(_conv_model(), _conv_model(scale=1.01))
    assert not report.ok
    y = report.by_name()["y"]
    assert y.max_abs_err > y.tolerance
    assert y.tolerance == pytest.approx(1e-4 + 1e-4 * y.max_ref)
    assert y.max_rel_err == pytest.approx(y.max_abs_err / y.max_ref)
    assert report.by_name()["k"].ok
    assert "MISMATCH in 1 output" in format_report(report)
    # A loose enough tolerance accepts the 1% change.
    assert validate(_conv_model(), _conv_model(scale=1.01), rtol=0.05).ok


def test_cosine_and_errors_on_a_hand_example() -> None:
    assert cosine(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(0.0)
    assert cosine(np.array([3.0, 4.0]), np.array([4.0, 3.0])) == pytest.approx(24 / 25)
    assert cosine(np.array([1.0, 2.0]), np.array([-2.0, -4.0])) == pytest.approx(-1.0)
    assert cosine(np.zeros(3), np.zeros(3)) == 1.0
    assert cosine(np.zeros(3), np.ones(3)) == 0.0
    check = compare("o", np.array([3.0, 4.0]), np.array([4.0, 3.0]), rtol=0.0, atol=1.0)
    assert check.max_abs_err == 1.0 and check.max_rel_err == pytest.approx(0.25)
    assert check.cosine == pytest.approx(0.96) and check.ok  # 1.0 <= 1.0 + 0 * 4
    assert not compare("o", np.array([3.0, 4.0]), np.array([4.0, 3.0]), 0.0, 0.99).ok


def test_a_reference_within_the_tolerance_of_zero_is_called_vacuous() -> None:
    # what random-weight EfficientNet-B0 / MobileViT exports end in: logits of 0 or ~1e-41
    tiny = np.array([[-5.3e-41, 8.9e-42]], np.float32)
    vacuous = compare("logits", tiny, np.zeros_like(tiny), 1e-4, 1e-4)
    assert vacuous.ok  # zeros pass: the comparison cannot fail
    real = compare("hidden", np.array([0.5, -2.0]), np.array([0.5, -2.0]), 1e-4, 1e-4)
    text = format_report(ValidationReport((vacuous, real), 1e-4, 1e-4, "random (seed 0)"))
    notes = [line for line in text.splitlines() if "zeros would pass" in line]
    assert len(notes) == 1 and "logits" in notes[0] and "--per-kernel" in notes[0]
    assert "zeros would pass" not in format_report(
        ValidationReport((real,), 1e-4, 1e-4, "random (seed 0)"))
    # a tolerance just below the reference's largest value makes the comparison meaningful
    edge = compare("edge", np.array([2e-4]), np.array([2e-4]), 0.0, 1.9e-4)
    assert "zeros would pass" not in format_report(
        ValidationReport((edge,), 0.0, 1.9e-4, "given arrays"))


def test_nan_on_one_side_fails_and_on_both_sides_matches() -> None:
    ref = np.array([1.0, np.nan, np.inf], np.float32)
    assert compare("o", ref, ref.copy(), 1e-4, 1e-4).ok
    other = np.array([1.0, 2.0, np.inf], np.float32)
    check = compare("o", ref, other, 1e-4, 1e-4)
    assert not check.ok and math.isinf(check.max_abs_err)


def test_npz_inputs(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float64)  # cast to float32 on the way in
    npz = tmp_path / "in.npz"
    np.savez(npz, x=x, n=np.array([7, 8]))
    report = validate(_conv_model(batch="N"), _conv_model(batch="N"), inputs=npz)
    assert report.ok and report.inputs == str(npz)
    assert report.by_name()["y"].shape == (2, 4, 4, 4)
    assert report.by_name()["k"].max_ref == 8.0
    given = validate(_conv_model(), _conv_model(), inputs={"x": x[:1], "n": np.array([1, 2])})
    assert given.ok and given.by_name()["k"].max_ref == 2.0


def test_missing_npz_input_raises(tmp_path: Path) -> None:
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.zeros((1, 3, 6, 6), np.float32))
    with pytest.raises(OpfuseError, match=r"in\.npz: no values for input\(s\) n"):
        validate(_conv_model(), _conv_model(), inputs=npz)
    with pytest.raises(OpfuseError, match="no such file"):
        validate(_conv_model(), _conv_model(), inputs=tmp_path / "absent.npz")


def test_symbolic_inner_dim_needs_inputs() -> None:
    with pytest.raises(OpfuseError, match=r"input 'x' dim 3 \('W'\) is symbolic.*--inputs"):
        validate(_conv_model(width="W"), _conv_model(width="W"))


def test_output_mismatch_raises() -> None:
    other = _conv_model()
    other.graph.output[1].name = "k2"
    other.graph.node[2].output[0] = "k2"
    with pytest.raises(OpfuseError, match="different outputs"):
        validate(_conv_model(), other)
    wider = _conv_model()
    wider.graph.node[0].attribute.append(helper.make_attribute("pads", [1, 1, 1, 1]))
    with pytest.raises(OpfuseError, match="output 'y' has shape"):
        validate(_conv_model(), wider)


def test_unloadable_model_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    with pytest.raises(OpfuseError, match=r"bad\.onnx: onnxruntime cannot load it: \S"):
        validate(_conv_model(), bad)
    with pytest.raises(OpfuseError, match="no such file"):
        validate(tmp_path / "absent.onnx", _conv_model())


def test_old_opset_original_is_upgraded_to_run() -> None:
    path = shared_onnx("pytorch-converted_test_BatchNorm2d_eval.onnx")  # BatchNormalization-6
    report = validate(path, path)
    assert report.ok and report.notes and "upgraded" in report.notes[0]


def test_a_dequantized_output_is_weighed_for_vacuity_in_steps_as_its_tolerance_is() -> None:
    """A float output made by DEQUANTIZE (a softmax in [0, 1], scale 1/256) compared bit-exactly
    within 1 step: max|reference| 0.9 is 230 steps, far from a tolerance of 1 step, so no
    "zeros would pass" note (it was printed for every output of a bit-exact emulated run)."""
    from types import SimpleNamespace

    from opfuse.measure.validate.source import validate_against_reference

    scale = 1.0 / 256
    probs = np.array([[0.9, 0.05, 0.05]], np.float32)
    spec = SimpleNamespace(name="probs", dtype=np.dtype(np.float32), scale=scale, shape=(1, 3))
    ref = SimpleNamespace(
        name="ref", outputs=(spec,), inputs=(SimpleNamespace(shape=(1, 8)),),
        random_inputs=lambda seed: {"x": np.zeros((1, 8), np.float32)},
        run=lambda feeds: {"probs": probs})
    report = validate_against_reference("m.tflite", lambda feeds: {"probs": probs.copy()},
                                        label="C", reference=ref, trials=2, steps=1.0)
    (check,) = report.outputs
    assert check.ok and check.max_ref == pytest.approx(0.9 * 256)
    assert "zeros would pass" not in format_report(report)
    # a reference that truly is within a step of zero still gets the note
    ref.run = lambda feeds: {"probs": np.full((1, 3), scale / 2, np.float32)}
    report = validate_against_reference("m.tflite", lambda feeds: {"probs": np.zeros((1, 3), np.float32)},
                                        label="C", reference=ref, trials=1, steps=1.0)
    assert "zeros would pass" in format_report(report)
