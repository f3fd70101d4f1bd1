"""A float .tflite compared at a tolerance tighter than its reference's own rounding: LiteRT's
default kernels (XNNPACK) and its reference kernels disagree too, and the output says whether the
compared side's error is of that size (the tolerance is the question) or beyond it (an op
computes something else). MediaPipe's pose_landmark_full is the real case
(measure/validate/reference_spread.py); here a small deep conv stack the test writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opfuse.measure.validate.ort import format_report
from opfuse.measure.validate.source import validate_against_reference
from opfuse.measure.validate.tflite_reference import TfliteReference
from tests.helpers.tflite_builder import RELU, SAME, TfliteBuilder

pytest.importorskip("ai_edge_litert")


def _conv_stack(path: Path, layers: int = 6, channels: int = 16) -> Path:
    rng = np.random.default_rng(0)
    b = TfliteBuilder()
    x = b.input("image", (1, 24, 24, channels), np.float32)
    for i in range(layers):
        w = b.const(f"w{i}", (rng.standard_normal((channels, 3, 3, channels)) * 0.3)
                    .astype(np.float32))
        bias = b.const(f"b{i}", (rng.standard_normal(channels) * 0.1).astype(np.float32))
        y = b.tensor(f"y{i}", (1, 24, 24, channels), np.float32)
        b.op("CONV_2D", [x, w, bias], [y], "Conv2DOptions", Padding=SAME, StrideH=1, StrideW=1,
             DilationHFactor=1, DilationWFactor=1, FusedActivationFunction=RELU)
        x = y
    b.output(x)
    path.write_bytes(b.build())
    return path


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    return _conv_stack(tmp_path / "stack.tflite")


def test_a_second_correct_implementation_is_named_a_tolerance_question(stack: Path) -> None:
    """The compared side is LiteRT's own reference kernels, at a zero tolerance: it fails (the two
    kernel sets round differently), and the output says rounding, not a wrong op."""
    second = TfliteReference(stack).reference_kernels()
    report = validate_against_reference(stack, second.run, label="LiteRT's reference kernels",
                                        trials=3, rtol=0.0, atol=0.0)
    assert not report.ok  # the premise: the two kernel sets do not agree bit for bit
    assert report.tolerance_question
    text = format_report(report)
    assert "not a wrong op; the tolerance is the question" in text
    assert text.splitlines()[-1].endswith("the tolerance is the question")


def test_an_error_over_the_spread_but_of_its_size_is_not_called_within_it(stack: Path) -> None:
    """pose_landmark_full's Identity_2 was 2.863 off where LiteRT's two kernel sets differ by
    2.723, and the verdict said "each within the reference's own spread". An error 1.5x the
    spread is still a tolerance question, and the verdict now says how far it may be."""
    reference = TfliteReference(stack)
    second = reference.reference_kernels()

    def past(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        want, other = reference.run(feeds), second.run(feeds)
        return {k: (want[k] + 1.5 * (other[k] - want[k])).astype(np.float32) for k in want}

    report = validate_against_reference(stack, past, label="1.5x past", trials=2, rtol=0.0,
                                        atol=0.0)
    assert not report.ok and report.tolerance_question
    verdict = format_report(report).splitlines()[-1]
    assert "within the reference's own spread" not in verdict
    assert "at most 2x the reference's own spread" in verdict


def test_an_error_beyond_the_spread_is_a_wrong_op(stack: Path) -> None:
    """One element off by far more than the kernel sets' own disagreement: named as more than
    rounding, and no tolerance verdict."""
    reference = TfliteReference(stack)

    def wrong(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {k: v.copy() for k, v in reference.reference_kernels().run(feeds).items()}
        for v in out.values():
            v.reshape(-1)[7] += 0.05 * float(np.abs(v).max())
        return out

    report = validate_against_reference(stack, wrong, label="a broken build", trials=2)
    assert not report.ok and not report.tolerance_question
    text = format_report(report)
    assert "more than their rounding, an op may compute something else" in text
    assert "tolerance is the question" not in text
