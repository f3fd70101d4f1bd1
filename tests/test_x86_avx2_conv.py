"""The AVX2 branch (x86-64-v3, no VNNI) of the x86 int8 conv core by sign and magnitude
(opfuse/backends/c/isa/x86/core.py, ``Arrays.signed``): the input staged as it is with z_x as its
padding, the bias ``b - z_x sum w``, ``vpmaddubsw(|x|, vpsignb(w, x))`` widened by ``vpmaddwd``
with ones; a weight of -128 keeps ``opfuse_x86_dot8`` on ``u = x + 128``. Each case at its ends
(inputs of -128 and 127 against weights of +-127, z_x at -128 and 127), bit for bit with TFLite
Micro on every build of tests/test_c_int8_x86.py; the x86-64-v3 build is the one that runs this
branch (the others compute as before)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

from tests.helpers.c_int8 import SX, SY, conv_pair  # noqa: E402
from tests.helpers.x86_int8 import RUNS, check, conv_models, fully_connected  # noqa: E402

SIGNED = "_mm256_sign_epi8("  # the branch's dot: in the C where it is taken
# (H, W, C, OC, K, stride, padding, dilation, act, depthwise multiplier or None, seed)
CASES = {
    "3x3_same": (7, 9, 6, 19, 3, 1, "SAME", 1, None, None, 41),  # padded taps, a partial quad
    "3x3_s2": (9, 10, 8, 24, 3, 2, "SAME", 1, "relu", None, 42),
    "pointwise": (6, 7, 13, 21, 1, 1, "VALID", 1, None, None, 43),
    "1x1_s2": (9, 9, 8, 16, 1, 2, "VALID", 1, None, None, 44),
    "c1_5x5_quads": (12, 11, 1, 16, 5, 2, "SAME", 1, None, None, 45),  # 4 taps a quad
    "dilated": (10, 10, 5, 17, 3, 1, "SAME", 2, "relu6", None, 46),
}
GROUPED = (10, 9, 3, 6, 3, 2, "SAME", 1, "relu", 2, 47)  # 3 groups of 1 -> 2 channels


def _taps(spec: tuple) -> int:
    _, _, c, _, k, *_ = spec
    return c * k * k


def _extreme_pair(spec: tuple, zx: int):  # noqa: ANN202
    """``spec``'s conv with weights of +-127 and a weight scale that brings sums of every tap at
    128 x 127 to about +-100 (so the extreme sums decide the outputs, not the clamp)."""
    h, w_, c, oc, k, *_, seed = spec
    rng = np.random.default_rng(seed)
    wt = rng.choice(np.array([-127, 127], np.int8), (oc, k, k, c))
    real = 100 / (_taps(spec) * 128 * 127)
    return conv_pair(*spec, ws=np.full(oc, real * SY / SX), weights=wt, zx=zx)


def _extreme_inputs(shape: tuple, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.choice(np.array([-128, 127], np.int8), shape)] for _ in range(RUNS)]


@pytest.mark.parametrize("zx", [-128, 127])
@pytest.mark.parametrize("case", sorted(CASES))
def test_extremes_match_tflite_micro(case: str, zx: int) -> None:
    """Inputs of -128 and 127 against weights of +-127 (each vpmaddubsw pair sum at 2 x 128 x
    127), the zero point at either end: every padded tap reads z_x and adds nothing."""
    spec = CASES[case]
    h, w_, c = spec[:3]
    p = _extreme_pair(spec, zx)
    p.m.inputs, p.m.outputs = [p.x], [p.y]
    check(p.m.build(), p.g.model(p.out), _extreme_inputs((1, h, w_, c), spec[-1]), [p.xi.name],
           needs=SIGNED)


@pytest.mark.parametrize("zx", [-128, 127, None])
def test_grouped_matches_tflite_micro(zx: int | None) -> None:
    """A grouped conv (3 groups, 2 channels each): the staging and bias per group."""
    h, w_, c = GROUPED[:3]
    p = conv_pair(*GROUPED, zx=zx)
    p.m.inputs, p.m.outputs = [p.x], [p.y]
    rng = np.random.default_rng(5)
    xs = [[rng.integers(-128, 128, (1, h, w_, c)).astype(np.int8)] for _ in range(RUNS)]
    check(p.m.build(), p.g.model(p.out), xs + _extreme_inputs((1, h, w_, c), 6)[:2],
           [p.xi.name], needs=SIGNED)


@pytest.mark.parametrize("zx", [-128, 127])
def test_weight_minus_128_keeps_dot8(zx: int) -> None:
    """A weight of -128 (vpsignb cannot negate it): the branch keeps opfuse_x86_dot8 and the
    unsigned staging, bit-exact at the extremes (-128 x -128 products, padded taps)."""
    spec = CASES["3x3_same"]
    h, w_, c, oc, k = spec[:5]
    rng = np.random.default_rng(48)
    wt = rng.choice(np.array([-127, 127], np.int8), (oc, k, k, c))
    wt[3, 1, 1, 2] = -128
    wt[0, 0, 0, :] = -128  # a padded tap's weights of the corner pixel
    real = 100 / (_taps(spec) * 128 * 128)
    p = conv_pair(*spec, ws=np.full(oc, real * SY / SX), weights=wt, zx=zx)
    p.m.inputs, p.m.outputs = [p.x], [p.y]
    check(p.m.build(), p.g.model(p.out), _extreme_inputs((1, h, w_, c), 49), [p.xi.name],
           needs="opfuse_x86_dot8(a0_0", lacks=SIGNED)


YMM_ADD = "_mm_cvtsi32_si128(d0_)"  # x86/residual_ymm.py: the other operand's bytes in lanes
# residual Adds/Subs (conv_models' tuples): TFLite's exact form (decimal scales), the proved
# short forms of tests/test_c_int8_x86.py's FAST (one rounding and a Relu after the Add; TFLite's
# two roundings; Sub), zero points at the ends (the other operand's, the output's, the conv's)
EXACT = ("Add", 0.05, 3, 0.12, -2, None)
SINGLE_RELU = ("Add", 0.0731, 5, 0.1377, -3, "relu")
DOUBLE = ("Add", 0.187, -7, 0.1972, 7, None)
SUB = ("Sub", 0.1523, 3, 0.1891, -128, None)
# (geometry, residual, the conv's value the Add's input 0, the conv's output zero point): the
# planes 7 x 9 (3x3_same: rows of 4 + 4 + 1 pixels on AVX2, 6 + 3 on ymm VNNI), 42 pixels a
# row (pointwise), 5 x 5 (3x3_s2, a Relu before the Add), 9 x 9 (1x1_s2), 10 x 10 (dilated, a
# Clip before the Add); channels 19, 21 (not a multiple of 8), 24, 16, 17
RESIDUALS = {
    "exact": ("3x3_same", EXACT, True, None),
    "exact_other_first": ("3x3_same", EXACT, False, None),
    "exact_relu_before": ("3x3_s2", EXACT, True, None),
    "exact_clip_before_relu_after": ("dilated", ("Add", 0.05, 3, 0.12, -2, "relu"), False, None),
    "single_relu_after": ("pointwise", SINGLE_RELU, True, None),
    "single_relu_other_first": ("3x3_same", SINGLE_RELU, False, None),
    "single_relu_before": ("3x3_s2", SINGLE_RELU, False, None),
    "double": ("3x3_same", DOUBLE, False, None),
    "double_1x1_s2": ("1x1_s2", DOUBLE, True, None),
    "sub": ("3x3_same", SUB, True, None),
    "sub_other_first": ("pointwise", SUB, False, None),
    "z_low": ("3x3_same", ("Add", 0.05, -128, 0.12, -128, "relu"), True, -128),
    "z_high": ("pointwise", ("Add", 0.05, 127, 0.12, 127, None), False, 127),
    "z_mixed_sub": ("1x1_s2", ("Sub", 0.0731, 127, 0.1377, -128, None), True, 127),
    "z_mixed_relu": ("dilated", ("Add", 0.187, -128, 0.1972, 127, "relu"), False, -128),
}


@pytest.mark.parametrize("case", sorted(RESIDUALS))
def test_residual_matches_tflite_micro(case: str) -> None:
    """Conv [+ Relu/Clip] + Add/Sub [+ Relu]: on the ymm branches (AVX2 and ymm VNNI, every
    build of check()) the Add in ymm vectors before emit_store_t4's packs (x86/residual_ymm.py),
    bit for bit with TFLite Micro."""
    geometry, spec, first, zy = RESIDUALS[case]
    tfl, model, runs, names = conv_models(CASES[geometry], residual=spec, first=first, zy=zy)
    check(tfl, model, runs, names, needs=YMM_ADD)


def test_gemm_rows_extremes_match_tflite_micro() -> None:
    """A fully connected layer of 3 rows (the conv core, not the GEMV) at the extremes."""
    fully_connected(70, 24, True, 3, extremes=True, needs=SIGNED)

