"""The int8 requantization helper (opfuse/backends/c/int8/requant.py) built the way validate
builds the host C (``gcc -O3 -march=native``), in the loop shape of a cascade's elementwise
member: per channel a broadcast factor, one row of 12 columns that gcc unrolls and vectorizes
whole. gcc 12.2 with AVX-512 narrowed the rounding divide's 32-bit shift to 16 bits there, so
products past 16 bits wrapped instead of clamping (int8 MobileNetV3 cascaded, 56 steps off TFLite
Micro). Checked against TFLite's MultiplyByQuantizedMultiplier written out in Python from its
definition (gemmlowp's SaturatingRoundingDoublingHighMul and RoundingDivideByPOT), not from the
C's shortcut; on a machine without AVX-512 the build is not vectorized that way and the check
still holds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c.int8.requant import tflite_helper
from opfuse.backends.c.isa import armv7em

TFLITE_HELPER = tflite_helper(armv7em.KERNELS)  # with the fast form the tests run


pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

CHANNELS, WIDTH = 48, 12
# (input zero point, factor zero point, multiplier, shift, output zero point): the first is the
# squeeze-excite Mul of tests/helpers/mobilenet_v3.py's int8 model that went wrong
CASES = [(-116, -128, 1249964898, -7, -114), (-3, -128, 1518500250, -9, 17),
         (40, 0, 1073741824, -1, -128), (0, -128, 2147483647, -15, 0)]

KERNEL = r"""
#include <stdint.h>
#include <stdio.h>
%(helper)s
__attribute__((noipa))
static void member(const int8_t *restrict x, int8_t *restrict y, const int8_t *restrict f) {
    for (int c = 0; c < %(channels)d; ++c) {
        const int8_t *xr = x + c*%(width)d;
        int8_t *yr = y + c*%(width)d;
        for (int i = 0; i < %(width)d; ++i) {
            const int32_t v = xr[i];
            yr[i] = (int8_t)opfuse_clamp(opfuse_requant((v - %(zx)d) * ((int32_t)f[c] - %(zf)d),
                                                        %(m)d, %(s)d) + %(zy)d, -128, 127);
        }
    }
}
int main(void) {
    int8_t x[%(n)d], y[%(n)d], f[%(channels)d];
    for (int i = 0; i < %(n)d; ++i) x[i] = (int8_t)((i * 37 + 11) %% 256 - 128);
    for (int c = 0; c < %(channels)d; ++c) f[c] = (int8_t)((c * 53 + 7) %% 256 - 128);
    for (int c = 0; c < %(channels)d / 4; ++c) f[c] = 127;  /* the largest products */
    for (int i = 0; i < %(width)d * 4; ++i) x[i] = 127;
    member(x, y, f);
    for (int i = 0; i < %(n)d; ++i) printf("%%d\n", y[i]);
    return 0;
}
"""


def _srdhm(a: int, b: int) -> int:
    """gemmlowp's SaturatingRoundingDoublingHighMul: (a*b + nudge) / 2^31, toward zero."""
    if a == b == -(2**31):
        return 2**31 - 1
    ab = a * b
    nudge = 2**30 if ab >= 0 else 1 - 2**30
    total = ab + nudge
    return abs(total) // 2**31 * (1 if total >= 0 else -1)


def _rdbpot(x: int, e: int) -> int:
    """gemmlowp's RoundingDivideByPOT: x / 2^e rounded to nearest, ties away from zero."""
    mask = (1 << e) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if (x & mask) > threshold else 0)


def _requant(x: int, m: int, s: int) -> int:
    left = max(s, 0)
    shifted = ((x << left) + 2**31) % 2**32 - 2**31
    return _rdbpot(_srdhm(shifted, m), max(-s, 0))


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    n = CHANNELS * WIDTH
    x = (np.arange(n) * 37 + 11) % 256 - 128
    f = (np.arange(CHANNELS) * 53 + 7) % 256 - 128
    f[: CHANNELS // 4] = 127
    x[: WIDTH * 4] = 127
    return x, f


@pytest.mark.parametrize("case", CASES, ids=[f"m{c[2]}_s{c[3]}" for c in CASES])
def test_vectorized_requantize_matches_tflite(case: tuple[int, ...], tmp_path: Path) -> None:
    zx, zf, m, s, zy = case
    source = KERNEL % {"helper": TFLITE_HELPER, "channels": CHANNELS, "width": WIDTH,
                       "n": CHANNELS * WIDTH, "zx": zx, "zf": zf, "m": m, "s": s, "zy": zy}
    (tmp_path / "k.c").write_text(source)
    subprocess.run(["gcc", "-O3", "-march=native", "-std=c99", "-Wall", "-Wextra", "-Werror",
                    "k.c", "-o", "k"], cwd=tmp_path, check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "k")], check=True, capture_output=True, text=True)
    got = np.array([int(v) for v in out.stdout.split()])
    x, f = _inputs()
    want = np.array([min(max(_requant((int(x[i]) - zx) * (int(f[i // WIDTH]) - zf), m, s) + zy,
                             -128), 127) for i in range(CHANNELS * WIDTH)])
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{bad.size} of {got.size} differ, first at {bad[:4].tolist()}: "
                           f"C {got[bad[:4]].tolist()} vs TFLite {want[bad[:4]].tolist()}")
