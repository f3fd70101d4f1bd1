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


@pytest.mark.parametrize("case", ["3x3_same", "3x3_s2", "1x1_s2"])
def test_residual_matches_tflite_micro(case: str) -> None:
    """Conv + Add: the AVX2 block's sums through the epilogue chain along a row."""
    tfl, model, runs, names = conv_models(CASES[case], residual=True)
    check(tfl, model, runs, names, needs=SIGNED)


def test_gemm_rows_extremes_match_tflite_micro() -> None:
    """A fully connected layer of 3 rows (the conv core, not the GEMV) at the extremes."""
    fully_connected(70, 24, True, 3, extremes=True, needs=SIGNED)

