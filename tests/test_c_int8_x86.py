"""The x86 int8 micro-kernels (opfuse/backends/c/isa/x86/core.py, x86/depthwise.py, x86/gemv.py)
vs TFLite Micro, bit for bit: each model's generated C is built with -march=x86-64-v2 (the
portable C), x86-64-v3 (the AVX2 branch), x86-64-v3 -mavxvnni or -mavx512vnni -mavx512vl (the ymm
VNNI branch, on a part with AVX-VNNI or with AVX-512) and native (the zmm VNNI and AVX-512
depthwise branches), and every build must equal TFLite Micro on every element."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

from tests.helpers.c_int8 import SX, SY, conv_pair, shared_tflite_c_matches_tflm  # noqa: E402
from tests.helpers.cpu import c_stdout  # noqa: E402
from tests.helpers.x86_int8 import (  # noqa: E402
    CPU,
    RUNS,
    builds,
    check,
    conv_models,
    fully_connected,
)


def _conv_models(case: str, residual: bool | tuple = False):  # noqa: ANN202
    return conv_models(CASES.get(case) or LARGE_SUMS[case], residual, case in LARGE_SUMS)


# (H, W, C, OC, K, stride, padding, dilation, act, depthwise multiplier or None, seed)
CASES = {
    "pointwise_odd": (6, 7, 13, 21, 1, 1, "VALID", 1, "relu", None, 1),
    "pointwise_tiles": (12, 11, 24, 48, 1, 1, "VALID", 1, None, None, 2),
    "3x3_same_odd": (7, 9, 5, 19, 3, 1, "SAME", 1, "relu6", None, 3),
    "3x3_s2_same": (9, 8, 16, 32, 3, 2, "SAME", 1, "relu", None, 4),
    "5x5_valid": (13, 7, 3, 7, 5, 1, "VALID", 1, None, None, 5),
    "dilated": (10, 10, 3, 17, 3, 1, "SAME", 2, None, None, 6),
    "1x1_s2": (9, 9, 8, 16, 1, 2, "VALID", 1, None, None, 7),
    "c1_5x5_s2_quads": (20, 11, 1, 24, 5, 2, "SAME", 1, "relu", None, 15),
    "grouped_mult2": (10, 9, 3, 6, 3, 2, "SAME", 1, "relu", 2, 8),
    "dw_flat_kws": (25, 5, 20, 20, 3, 1, "SAME", 1, "relu", 1, 9),
    "dw_rows_s2": (19, 37, 9, 9, 3, 2, "SAME", 1, "relu6", 1, 10),
    "dw_valid_5x5": (11, 21, 4, 4, 5, 2, "VALID", 1, None, 1, 11),
    "dw_rows_s1_valid": (9, 40, 3, 3, 3, 1, "VALID", 1, None, 1, 12),
    "dw_flat_one_row": (1, 20, 5, 5, 3, 1, "SAME", 1, None, 1, 13),  # tap rows never inside
    "dw_7x7_small": (3, 3, 17, 17, 7, 1, "SAME", 1, "relu", 1, 14),
    "dw_rows_of_16": (5, 16, 6, 6, 3, 1, "SAME", 1, "relu6", 1, 26),  # whole vectors only
    # x86/lanes.py: 4 rows of 14 a block (2 rows left, a partial vector a row, 21 = 4 x 5 + 1
    # channels); rows of 5 vectors (a chunk of 4, then 1, partial), dilated
    "lanes_short_rows": (6, 14, 6, 21, 3, 1, "SAME", 1, "relu", None, 16),
    "lanes_long_rows": (5, 72, 4, 16, 3, 1, "VALID", 2, None, None, 17),
    # stride 2: the staged rows split into even and odd columns (x86/lanes.py)
    "lanes_s2": (12, 30, 5, 12, 3, 2, "SAME", 1, "relu", None, 18),
    "lanes_1x1_s2": (8, 32, 6, 20, 1, 2, "VALID", 1, None, None, 19),  # 20: not a multiple of 16
    "lanes_s2_64": (6, 32, 8, 64, 3, 2, "SAME", 1, "relu", None, 25),  # S2_CHANNELS: lanes too
    # rows of 8 (4) pixels, 2 (4) a vector; 20 rows of 4: blocks of 16 rows, then 4
    "lanes_stacked_8": (8, 8, 12, 24, 3, 1, "SAME", 1, "relu", None, 20),
    "lanes_stacked_4": (20, 4, 5, 7, 3, 1, "SAME", 1, None, None, 21),
    # the portable conv's line buffer (int8/row_tiles.py) of a whole row would take 112 x 3 x
    # 102 bytes, over LINE_BYTES: two bands of 50 columns instead
    "rows_wide_banded": (4, 100, 112, 8, 3, 1, "SAME", 1, None, None, 24),
}


# x86/depthwise_vbmi.py's general requantization (opfuse_x86_rq16s, not the short rq16r): the
# sums of _large_sums' channels reach 2^30 or take a left shift; a flat plane of 25 taps and rows
LARGE_SUMS = {
    "dw_large_flat": (6, 7, 12, 12, 5, 1, "SAME", 1, None, 1, 22),
    "dw_large_rows_s2": (9, 40, 8, 8, 3, 2, "SAME", 1, "relu", 1, 23),
}




@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_builds_match_tflite_micro(case: str) -> None:
    """Every build bit-exact; a depthwise conv's AVX2 branch (x86/depthwise_avx2.py) requantizes
    by the short rounding (its sums below 2^30) and stores its vectors packed to bytes (rows of
    3-38 columns: 8 a store and a tail of OW % 8, or either)."""
    tfl, model, runs, names = _conv_models(case)
    check(tfl, model, runs, names, needs="const __m256i r = opfuse_x86_rq8r(acc"
          if case.startswith("dw_") else "opfuse_x86_")


@pytest.mark.parametrize("case", sorted(LARGE_SUMS))
def test_depthwise_large_sums_builds_match_tflite_micro(case: str) -> None:
    """The AVX-512 VBMI depthwise branch requantizes with opfuse_x86_rq16s and the AVX2 one with
    opfuse_x86_rq8 (their short forms cannot hold these sums and shifts), bit-exact on every
    build."""
    tfl, model, runs, names = _conv_models(case)
    check(tfl, model, runs, names, needs="r = opfuse_x86_rq16s(", lacks="opfuse_x86_rq8r(acc")


@pytest.mark.parametrize("case", ["pointwise_odd", "3x3_same_odd", "dw_flat_kws", "dw_rows_s2",
                                  "pointwise_tiles", "dilated", "1x1_s2", "lanes_short_rows",
                                  "lanes_long_rows", "lanes_s2", "lanes_stacked_8"])
def test_conv_add_chain_builds_match_tflite_micro(case: str) -> None:
    tfl, model, runs, names = _conv_models(case, residual=True)
    check(tfl, model, runs, names,  # x86/residual.py's exact form (a depthwise conv: the chain)
           needs="opfuse_x86_" if case.startswith("dw_") else "o_x")


# x86/residual_fast.py's short forms, proved per layer: one rounding at the output, TFLite's
# two ("fh_"; the one refuted below zero, no Relu); a Relu's bound kept (max), Sub
FAST = {
    "single_relu": (("Add", 0.0731, 5, 0.1377, -3, "relu"), "fo_ = _mm512_max_epi32"),
    "double": (("Add", 0.187, -7, 0.1972, 7, None), "fh_"),
    "sub": (("Sub", 0.1523, 3, 0.1891, -128, None), "_mm512_sub_epi32(f0_, f1_)"),
}


@pytest.mark.parametrize("fast", sorted(FAST))
@pytest.mark.parametrize("case", ["3x3_same_odd", "pointwise_tiles", "1x1_s2", "lanes_short_rows",
                                  "lanes_s2", "lanes_stacked_8"])
def test_conv_fast_add_builds_match_tflite_micro(case: str, fast: str) -> None:
    """The proved short form in each place a residual Add runs (pixel lanes, rows, the
    channel-major block), bit-exact with TFLite Micro on every build."""
    spec, needs = FAST[fast]
    tfl, model, runs, names = _conv_models(case, residual=spec)
    check(tfl, model, runs, names, needs=needs)


@pytest.mark.parametrize("wmin", [-127, -128])
def test_pointwise_extreme_products_build_match_tflite_micro(wmin: int) -> None:
    """The portable pointwise tile sums two input channels' products in int16 where that is
    exact (int8/pointwise.py, ``pairs_fit_int16``): weights of +-127 against inputs of -128 and
    127 reach its bound (2 x 128 x 127); one weight of -128 leaves one product a term (two
    -128 x -128 would wrap to -32768). Bit-exact with TFLite Micro on every build."""
    h, w_, c, oc = 5, 9, 7, 10
    rng = np.random.default_rng(31)
    wt = rng.choice([wmin, 127], (oc, 1, 1, c)).astype(np.int8)
    wt[:, 0, 0, :2] = wmin  # each channel's first pair: two products of -128 x wmin
    spec = (h, w_, c, oc, 1, 1, "VALID", 1, None, None, 31)
    # sums of up to 7 x 16384 brought to about +-100: a wrapped pair term moves an output by 80
    p = conv_pair(*spec, ws=np.full(oc, SY / (SX * 800)), weights=wt)
    p.m.inputs, p.m.outputs = [p.x], [p.y]
    runs = [[rng.choice(np.array([-128, 127], np.int8), (1, h, w_, c))] for _ in range(RUNS)]
    for r in runs:
        r[0][..., :2] = -128
    check(p.m.build(), p.g.model(p.out), runs, [p.xi.name])


# one row: the GEMV (x86/gemv.py): K not a multiple of 4 or 64, N not of a 16-channel vector
# or of the plan's blocks (300 = 3 blocks of 7, 6 and 6 vectors: 112 + 96 + 96 channels with 4
# of padding), ad01's widest layer; two rows: the conv core
@pytest.mark.parametrize(("k", "n", "per_channel", "rows"), [
    (37, 10, True, 1), (64, 33, False, 1), (5, 130, True, 1), (640, 128, False, 1),
    (203, 300, True, 1), (130, 8, False, 1), (1, 16, False, 1), (67, 1, True, 1),
    (37, 10, True, 2)])
def test_fully_connected_builds_match_tflite_micro(k: int, n: int, per_channel: bool,
                                                   rows: int) -> None:
    fully_connected(k, n, per_channel, rows)


def test_fully_connected_left_shift_builds_match_tflite_micro() -> None:
    """A per-tensor multiplier above 1 (a left shift): the GEMV's opfuse_x86_rq16s."""
    fully_connected(3, 20, False, 1, sy=2.5e-4, wmax=2, needs="r0 = opfuse_x86_rq16s(")


def test_fully_connected_extremes_builds_match_tflite_micro() -> None:
    """The AVX2 GEMV's sign and magnitude at the ends: rows of -128 and 127 against weights of
    +-127 (pair sums 2 * 128 * 127), and a weight of -128, which keeps opfuse_x86_dot8."""
    fully_connected(70, 24, True, 1, extremes=True, needs="_mm256_sign_epi8(")
    fully_connected(70, 24, True, 1, extremes=True, w128=True)




def test_kws_ref_model_builds_match_tflite_micro() -> None:
    if "avx512_vnni" not in CPU and "avx_vnni" not in CPU:
        pytest.skip("this CPU has neither avx512_vnni nor avx_vnni")
    shared_tflite_c_matches_tflm("kws_ref_model.tflite", list(builds()), 4, "opfuse_x86_dot16")


def test_residualinput_rescale_equals_the_64_bit_requantization() -> None:
    """x86/residual.py's split 32-bit input rescale of a residual Add equals ``opfuse_x86_rq16``
    (bit-exact with TFLite Micro, above) for every byte difference -255..255, on 60 seeded
    multipliers and shifts, and on the edges (shift 0, the largest and smallest multipliers)."""
    from opfuse.backends.c.cgen import CWriter
    from opfuse.backends.c.isa.x86.helpers import PRELUDE
    from opfuse.backends.c.isa.x86.residual import input_rescale

    if "avx512bw" not in CPU:
        pytest.skip("this CPU has no AVX-512BW: the zmm residual branch cannot run here")
    rng = np.random.default_rng(31)
    cases = [(int(rng.integers(2**30, 2**31 - 1)), -int(rng.integers(0, 14))) for _ in range(60)]
    cases += [(2**31 - 1, 0), (2**30, 0), (1, -3), (2**31 - 1, -13), (1518500250, -1)]
    w = CWriter(0)
    for k, (m, s) in enumerate(cases):
        w.open(f"static void case{k}(const int32_t *x, int32_t *fast, int32_t *wide)")
        w("const __m512i v = _mm512_loadu_si512((const void *)x);")
        input_rescale(w, "f", "v", 0, m, s, 20)
        w("_mm512_storeu_si512((void *)fast, f);")
        w(f"_mm512_storeu_si512((void *)wide, opfuse_x86_rq16(_mm512_slli_epi32(v, 20), "
          f"_mm512_set1_epi32({m}), _mm512_set1_epi32({s}), 0, INT32_MIN, INT32_MAX));")
        w.close()
    calls = " ".join(f"case{k}(x, f, g); bad += memcmp(f, g, sizeof f) != 0;"
                     for k in range(len(cases)))
    source = ("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n" + PRELUDE +
              "\n".join(w.lines) + "\nint main(void) { int bad = 0;\n"
              "for (int d = -256; d < 256; d += 16) { int32_t x[16], f[16], g[16];\n"
              "for (int i = 0; i < 16; ++i) x[i] = d + i;\n" + calls + "}\n"
              "printf(\"%d\\n\", bad); return 0; }\n")
    assert c_stdout(source, "opfuse-rescale-") == "0"
    w = CWriter(0)  # and the split was the code compared, not the fallback
    input_rescale(w, "f", "v", 0, cases[0][0], cases[0][1], 20)
    assert "opfuse_x86_rq16" not in "\n".join(w.lines)


def test_round_shift_equals_rounding_divide_by_pot() -> None:
    """x86/residual.py's ``(h + 2^(e-1) - (h < 0)) >> e`` equals TFLite's RoundingDivideByPOT
    (mask, remainder, threshold) for |h| < 2^30, every shift 1..31: the edges of each rounding
    tie and 2^16 seeded values."""
    from opfuse.backends.c.cgen import CWriter
    from opfuse.backends.c.isa.x86.helpers import PRELUDE
    from opfuse.backends.c.isa.x86.residual import round_shift

    if "avx512bw" not in CPU:
        pytest.skip("this CPU has no AVX-512BW")
    w = CWriter(0)
    for e in range(1, 32):
        w.open(f"static void case{e}(const int32_t *x, int32_t *out)")
        w("const __m512i h = _mm512_loadu_si512((const void *)x);")
        round_shift(w, "r", "h", e)
        w("_mm512_storeu_si512((void *)out, r);")
        w.close()
    calls = " ".join(f"case{e}(x, f); for (int i = 0; i < 16; ++i) bad += f[i] != "
                     f"rdbpot(x[i], {e});" for e in range(1, 32))
    rng = np.random.default_rng(7)
    values = {int(v) for v in rng.integers(-(2**30) + 1, 2**30, 2**16)}
    for e in range(1, 31):  # around each tie: k*2^e + 2^(e-1) + {-1, 0, 1}
        for k in (-3, -1, 0, 2):
            values |= {k * 2**e + 2 ** (e - 1) + d for d in (-1, 0, 1)}
    values = sorted(v for v in values if abs(v) < 2**30)
    values += [values[-1]] * (-len(values) % 16)
    table = ", ".join(str(v) for v in values)
    source = ("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n" + PRELUDE +
              "\nstatic int32_t rdbpot(int32_t x, int e) { const int32_t mask = (int32_t)"
              "(((int64_t)1 << e) - 1); const int32_t thr = (mask >> 1) + (x < 0);"
              " return (int32_t)(((int64_t)x >> e) + ((x & mask) > thr)); }\n" +
              "\n".join(w.lines) + f"\nstatic const int32_t vals[{len(values)}] = {{{table}}};\n"
              "int main(void) { int bad = 0; int32_t f[16];\n"
              f"for (int j = 0; j < {len(values)}; j += 16) {{ const int32_t *x = vals + j; "
              + calls + "}\nprintf(\"%d\\n\", bad); return 0; }\n")
    assert c_stdout(source, "opfuse-round-") == "0"

