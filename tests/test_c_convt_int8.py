"""The int8 ConvTranspose in the C (backends/c/int8/convt8.py: the float kernel's sub-pixel phases
over int8 sums) against TFLite Micro's TRANSPOSE_CONV, bit for bit: each case one TFLite model
(tests/helpers/tflite_builder.py), its input's zero point nonzero (the padded line buffer and
each phase's folded bias), weights per channel."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

from opfuse.backends.c import emit_c  # noqa: E402
from opfuse.errors import OpfuseError  # noqa: E402
from opfuse.measure.validate.c_int8 import validate_c_int8  # noqa: E402
from opfuse.pipeline import compile_model  # noqa: E402
from tests.helpers.tflite_builder import RELU, SAME, VALID, TfliteBuilder  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

# (input H, W, C; output channels; kernel; stride; padding; fused activation; input zero point)
CASES = {
    "k4s2_same": ((6, 7, 16), 8, 4, 2, SAME, 0, -5),
    "k2s2_valid_in_place": ((5, 9, 8), 4, 2, 2, VALID, RELU, 3),
    "k3s2_valid_blocks": ((4, 5, 6), 12, 3, 2, VALID, 0, 7),  # unequal taps, a padded block
    "k3s1_same_relu": ((5, 6, 5), 6, 3, 1, SAME, RELU, -128),
    "k4s2_segments": ((3, 100, 64), 8, 4, 2, SAME, 0, 11),  # rows over LINE_FLOATS
}


def _model(path: Path, case: str) -> Path:
    (h, w_, c), oc, k, s, padding, act, zx = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    out = (1, h * s, w_ * s, oc) if padding == SAME else \
        (1, (h - 1) * s + k, (w_ - 1) * s + k, oc)
    b = TfliteBuilder()
    x = b.input("x", (1, h, w_, c), np.int8, scale=0.04, zero_point=zx)
    shape = b.const("shape", np.asarray(out, np.int32))
    scales = 0.004 + 0.0005 * np.arange(oc)
    wt = b.const("w", rng.integers(-127, 128, (oc, k, k, c)).astype(np.int8), scale=scales,
                 axis=0)
    bias = b.const("b", rng.integers(-2000, 2000, oc).astype(np.int32), scale=0.04 * scales,
                   axis=0)
    y = b.tensor("y", out, np.int8, scale=0.2, zero_point=-3)
    b.op("TRANSPOSE_CONV", [shape, wt, x, bias], [y], "TransposeConvOptions", Padding=padding,
         StrideH=s, StrideW=s, **({"FusedActivationFunction": act} if act else {}))
    b.output(y)
    path.write_bytes(b.build())
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_int8_convt_is_tflite_micro_bit_for_bit(case: str, tmp_path: Path) -> None:
    result = compile_model(str(_model(tmp_path / f"{case}.tflite", case)), "x86-host")
    assert any(k.ops[0] == "ConvTranspose" for k in result.partition.kernels)
    report = validate_c_int8(result, trials=4)
    assert report.ok, report
    assert all(o.max_abs_err == 0 for o in report.outputs), report.outputs


@pytest.mark.parametrize("op", ["CONV_2D", "TRANSPOSE_CONV"])
def test_weights_with_a_zero_point_are_refused_naming_the_node(op: str, tmp_path: Path) -> None:
    """int8/common.conv_operands: one check for Conv and ConvTranspose, the message names the
    node and its op (the C would otherwise sum (w - z_w) as w)."""
    b = TfliteBuilder()
    x = b.input("x", (1, 5, 5, 4), np.int8, scale=0.04, zero_point=1)
    wt = b.const("w", np.ones((6, 3, 3, 4), np.int8), scale=0.01, zero_point=3)
    out = (1, 10, 10, 6) if op == "TRANSPOSE_CONV" else (1, 5, 5, 6)
    y = b.tensor("y", out, np.int8, scale=0.2, zero_point=-3)
    if op == "TRANSPOSE_CONV":
        shape = b.const("shape", np.asarray(out, np.int32))
        b.op(op, [shape, wt, x], [y], "TransposeConvOptions", Padding=SAME, StrideH=2, StrideW=2)
    else:
        b.op(op, [x, wt], [y], "Conv2DOptions", Padding=SAME, StrideH=1, StrideW=1)
    b.output(y)
    path = tmp_path / f"{op}.tflite"
    path.write_bytes(b.build())
    result = compile_model(str(path), "cortex-m55")
    kind = "ConvTranspose" if op == "TRANSPOSE_CONV" else "Conv"
    with pytest.raises(OpfuseError, match=rf"{kind} node .*nonzero zero point"):
        emit_c(result, tmp_path / "c")
    assert not (tmp_path / "c" / "model.c").exists()
