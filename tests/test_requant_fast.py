"""The fast requantization (opfuse/backends/c/int8/requant.py, ``opfuse_requant_r``) is TFLite's
MultiplyByQuantizedMultiplier wherever the generator uses it (docs/architecture.md, "int8 matrix
kernels on Cortex-M"): |x| < 2^30 and a right shift. Checked on the host's C (its steps in portable
C, -DOPFUSE_REQUANT_R_PORTABLE; the SMMULR form runs in the board tests) against a Python model of TFLite's integer steps and
against the general helper, on random and boundary operands, with UBSan."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c.int8.common import FAST_BOUND, acc_bound, requant_arrays
from opfuse.backends.c.int8.requant import tflite_helper
from opfuse.backends.c.isa import armv7em
from opfuse.quant import multipliers

TFLITE_HELPER = tflite_helper(armv7em.KERNELS)  # with the fast form the tests run


def _tflite(x: int, m: int, shift: int) -> int:
    """TFLite's MultiplyByQuantizedMultiplier for a right shift, step by step in Python ints."""
    ab = x * m
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    high = int((ab + nudge) / (1 << 31)) if abs(ab + nudge) < 1 << 52 else None
    if high is None:  # exact truncating division for large products
        q, r = divmod(abs(ab + nudge), 1 << 31)
        high = q if ab + nudge >= 0 else -q
    e = -shift
    mask = (1 << e) - 1
    rem, thr = high & mask, (mask >> 1) + (1 if high < 0 else 0)
    return (high >> e) + (1 if rem > thr else 0)


def _operands(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    lim = FAST_BOUND - 1
    x = rng.integers(-lim, lim + 1, n)
    x[:8] = [0, 1, -1, lim, -lim, 2, -2, 1 << 20]
    m = rng.integers(1 << 30, (1 << 31) - 1, n)
    m[:4] = [1 << 30, (1 << 31) - 1, 1 << 30, (1 << 31) - 1]
    e = rng.integers(1, 32, n)
    # ties of the rounding divide: x*m/2^31 an odd multiple of 2^(e-1), with m = 2^30
    t = rng.integers(-(1 << 18), 1 << 18, n // 8) * 2 + 1
    ties = slice(8, 8 + n // 8)
    x[ties], m[ties], e[ties] = t * 4, 1 << 30, 2
    return np.stack([x, m, e], axis=1)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_fast_requant_is_tflites(tmp_path: Path) -> None:
    ops = _operands(4000)
    rows = ",\n".join(f"{{{x}, {m}, {e}}}" for x, m, e in ops)
    src = tmp_path / "rq.c"
    src.write_text(
        "#include <stdint.h>\n#include <stdio.h>\n#include <math.h>\n" + TFLITE_HELPER
        + f"static const int32_t ops[{len(ops)}][3] = {{\n{rows}\n}};\n"
        "int main(void) {\n"
        f"    for (int i = 0; i < {len(ops)}; ++i) {{\n"
        "        const int32_t x = ops[i][0], m = ops[i][1], e = ops[i][2];\n"
        "        printf(\"%d %d %d\\n\", (int)opfuse_requant_r(x, m, -e),"
        " (int)opfuse_requant(x, m, -e),"
        " (int)opfuse_requant_d(x * 2, m, e, (int32_t)1 << (e - 1)));\n"
        "    }\n    return 0;\n}\n")
    exe = tmp_path / "rq"
    subprocess.run(["gcc", "-O2", "-std=c99", "-DOPFUSE_REQUANT_R_PORTABLE", "-Wall", "-Wextra", "-Werror",
                    "-fsanitize=undefined", "-fno-sanitize-recover=undefined",
                    str(src), "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    assert "runtime error" not in proc.stderr
    got = [tuple(map(int, line.split())) for line in proc.stdout.splitlines()]
    assert len(got) == len(ops)
    for (x, m, e), (fast, general, doubled) in zip(ops.tolist(), got, strict=True):
        want = _tflite(x, m, -e)
        assert fast == want == general == doubled, (x, m, e, fast, general, doubled, want)


class _Store:
    rounding, narrow_constants = "tflite", True


class _Params:
    """What requant_arrays asks of a kernel's parameters: the store and the weights it adds."""

    def __init__(self) -> None:
        self.store, self.added = _Store(), {}

    def weight(self, key: str, array: np.ndarray, ctype) -> str:  # noqa: ANN001
        self.added[key] = np.asarray(array)
        return f"w{len(self.added)}"


def test_fast_form_only_where_it_is_exact() -> None:
    """opfuse_requant_r where every shift is a right one and the accumulator bound is below
    2^30; literals, no arrays, where every channel shares one multiplier."""
    real = np.array([0.0031, 0.0007, 0.02, 0.11])
    p = _Params()
    rq = requant_arrays(p, "k", real, FAST_BOUND - 1)
    m, s = multipliers(real)
    assert rq.fast and rq.literal is None and "opfuse_requant_r(acc, " in rq("acc", "c")
    assert np.array_equal(p.added["k:rqs"], s) and np.array_equal(p.added["k:rqm"], m)
    for bound, scales in ((FAST_BOUND, real), (None, real), (5, np.array([0.003, 0.7]))):
        slow = requant_arrays(_Params(), "k", scales, bound)  # too large, unknown, a shift of 0
        assert not slow.fast and "opfuse_requant(acc, " in slow("acc", "c")
    p = _Params()
    one = requant_arrays(p, "k", np.full(6, 0.0042), 1000)
    (mm,), (ss,) = multipliers([0.0042])
    assert one.literal == (mm, ss) and not p.added
    assert one("acc", "c") == f"opfuse_requant_r(acc, {mm}, {ss})"


def test_acc_bound_holds() -> None:
    """No input in range gives more than the bound, the most extreme one included (each tap at
    the end of the range its weight and the bias's sign favour)."""
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (5, 9))
    bias = rng.integers(-9000, 9000, 5)
    lo, hi, zx = -128, 127, -20
    bound = acc_bound(w, bias, lo, hi, zx)
    samples = rng.integers(lo, hi + 1, (2000, 9))
    assert np.abs((samples - zx) @ w.T + bias).max() <= bound
    extreme = max(abs(int(((np.where(w[c] * sign >= 0, hi, lo) - zx) * w[c]).sum() + bias[c]))
                  for c in range(5) for sign in (1, -1))
    assert extreme <= bound < extreme + 128 * int(np.abs(w).sum())
