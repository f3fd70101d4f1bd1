"""int8 MobileNetV3-style models (squeeze-excite, hard-swish; tests/helpers/mobilenet_v3.py) through the C
backend on every target with an emulated board and the host (issue 18): a squeeze-excite Mul the
C cannot fuse is refused by the partitioner (``not_supported_by_target``, naming the C backend),
so the model compiles, and the C matches its reference: TFLite Micro bit-exact for the .tflite,
within one quantization step of onnxruntime with its optimizations off (QDQ run as written) for
the quantize_static QDQ model."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from opfuse.api import compile
from opfuse.backends.c.emit import c_schedule
from opfuse.measure.sessions import one_thread_session
from opfuse.measure.validate.c_int8 import stepped_reference, validate_c_int8
from tests.helpers.mobilenet_v3 import float_model, int8_tflite
from tests.helpers.quant import quantize

TARGETS = ["x86-host", "cortex-m7", "cortex-m4"]


@pytest.fixture(scope="module")
def tflite_path(tmp_path_factory) -> Path:
    return int8_tflite(tmp_path_factory.mktemp("mnv3") / "mobilenet_v3_int8.tflite")


@pytest.fixture(scope="module")
def qdq_path(tmp_path_factory) -> Path:
    return quantize(float_model(), tmp_path_factory.mktemp("mnv3q"), "qdq", per_channel=True,
                    samples=8)


def _se_refusals(result) -> list[str]:  # noqa: ANN001 (CompileResult)
    return [d.message for d in result.partition.decisions
            if d.reason == "not_supported_by_target" and "the C backend" in d.message]


@pytest.mark.parametrize("target", TARGETS)
def test_tflite_c_is_bit_exact_with_tflite_micro(tflite_path: Path, target: str) -> None:
    result = compile(tflite_path, target)
    report = validate_c_int8(result, trials=8)
    assert report.ok, "\n".join(report.notes)
    assert all(o.max_abs_err == 0 for o in report.outputs)


@pytest.mark.parametrize("target", ["cortex-m7", "cortex-m4"])
def test_int8_cascades_stream_through_an_in_place_hard_swish(tflite_path: Path,
                                                             target: str) -> None:
    """The cascade rule is float's (issue 20): Conv -> HardSwish (in place) -> Conv streams, the
    buffer the two values share leaves the arena, and the arena is below layer by layer; the C
    of those cascades is the one the bit-exact test above checks."""
    result = compile(tflite_path, target)
    members = [tuple(m.ops) for k in result.partition.kernels if k.is_cascade for m in k.members]
    assert ("HardSwish",) in members, members
    streamed = [k.ops for k in result.partition.kernels if k.is_cascade]
    assert any(ops[:3] == ("Conv", "HardSwish", "Conv") for ops in streamed), streamed
    cascaded = c_schedule(result).plan.peak_bytes
    layered = c_schedule(result, cascades=False).plan.peak_bytes
    assert cascaded < layered, (cascaded, layered)


@pytest.mark.parametrize("target", TARGETS)
def test_qdq_c_is_within_one_step_of_onnxruntime_unoptimized(qdq_path: Path, target: str) -> None:
    result = compile(qdq_path, target)
    reference = stepped_reference(result)
    reference.session = one_thread_session(str(qdq_path), ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    reference.name = "onnxruntime (ORT_DISABLE_ALL: QDQ as written)"
    report = validate_c_int8(result, trials=8, steps=1, reference=reference)
    assert report.ok, "\n".join(report.notes)
    assert all(o.max_abs_err <= 1 for o in report.outputs)


@pytest.mark.parametrize("which", ["tflite", "qdq"])
def test_the_squeeze_excite_mul_the_c_cannot_fuse_is_refused_by_the_partitioner(
        which: str, tflite_path: Path, qdq_path: Path) -> None:
    """On x86-host (int8_requantize_once, residual_add) the target file alone would let the Mul
    join its scale's 1x1 conv kernel; the C's output stage holds one shape, so the partitioner
    refuses it, once per squeeze-excite block, naming the shapes."""
    result = compile(tflite_path if which == "tflite" else qdq_path, "x86-host")
    refusals = _se_refusals(result)
    assert len(refusals) == 2, refusals
    assert all("Mul writes [1, " in m and "1, 1]" in m for m in refusals), refusals
