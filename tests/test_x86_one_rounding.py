"""x86's TFLite requantization as one rounding above a Relu (lo >= z_y): x86/lanes.py's
``one_rounding`` and x86/core.py's per-lane ``once_lanes``/``once_value`` in C against the
helpers they replace (``opfuse_x86_rq16r``, ``opfuse_x86_rq16``), around rounding ties; the
kernels that use them are bit-exact with TFLite Micro in tests/test_c_int8_x86.py."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.cpu import c_stdout, cpu_flags

CPU = cpu_flags()


def test_one_rounding_equals_rq16r_above_a_relu() -> None:
    """x86/lanes.py's one-rounding requantization (a Relu with lo >= z_y) equals
    ``opfuse_x86_rq16r`` on sums |x| < 2^30 for every right shift 1..31: around each rounding
    tie of 40 seeded multipliers, and 2^12 seeded sums each."""
    from opfuse.backends.c.cgen import CWriter
    from opfuse.backends.c.isa.x86.helpers import PRELUDE
    from opfuse.backends.c.isa.x86.lanes import one_rounding

    if "avx512bw" not in CPU:
        pytest.skip("this CPU has no AVX-512BW")
    rng = np.random.default_rng(11)
    w = CWriter(0)
    w.open("static int check(const int32_t *x, int32_t m, int e, int zy, int lo)")
    w("const __m512i a = _mm512_loadu_si512((const void *)x), m_ = _mm512_set1_epi32(m);")
    w("const __m512i r_ = _mm512_set1_epi64((1LL << 30) + (1LL << (30 + e)));")
    w("const __m128i n_ = _mm_cvtsi32_si128(31 + e), n1_ = _mm_cvtsi32_si128(e - 1);")
    one_rounding(w, "a", "zy", "lo", 127)  # type: ignore[arg-type]  # C names for the ints
    w("int32_t f[16], g[16]; _mm512_storeu_si512((void *)f, v);")
    w("_mm512_storeu_si512((void *)g, opfuse_x86_rq16r(a, m_, e, zy, lo, 127));")
    w("return memcmp(f, g, sizeof f) != 0;")
    w.close()
    ms = [int(v) for v in rng.integers(2**30, 2**31 - 1, 40)] + [2**30 + 1, 2**31 - 1]
    rows = []
    for m in ms:
        e = int(rng.integers(1, 32))
        tie = (2 * ((1 << (30 + e)) - (1 << 30))) // m  # x*m near h's tie of the second rounding
        xs = [int(v) for v in rng.integers(-(2**30) + 1, 2**30, 4096)]
        xs += [t + d for t in (tie, -tie, tie * 3, 0) for d in range(-8, 8) if abs(t + d) < 2**30]
        xs += [xs[-1]] * (-len(xs) % 16)
        rows += [(m, e, xs[j:j + 16]) for j in range(0, len(xs), 16)]
    table = ",\n".join(f"{{{m}, {e}, {{{', '.join(map(str, xs))}}}}}" for m, e, xs in rows)
    source = ("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n" + PRELUDE +
              "\n".join(w.lines) + "\nstruct row { int32_t m; int e; int32_t x[16]; };\n"
              f"static const struct row rows[{len(rows)}] = {{{table}}};\n"
              "int main(void) { int bad = 0;\n"
              f"for (int i = 0; i < {len(rows)}; ++i) for (int zy = -128; zy < 128; zy += 51)\n"
              "bad += check(rows[i].x, rows[i].m, rows[i].e, zy, zy > -128 ? zy + 3 : zy);\n"
              "printf(\"%d\\n\", bad); return 0; }\n")
    assert c_stdout(source, "opfuse-once-") == "0"


def test_one_rounding_per_lane_equals_rq16_above_a_relu() -> None:
    """x86/core.py's channel-major form of the same (a multiplier and shift per lane, counts
    and constants per 64-bit lane) equals ``opfuse_x86_rq16`` with lo >= z_y: 2^14 seeded sums
    against 64 vectors of seeded multipliers and right shifts 1..31, ties included."""
    from opfuse.backends.c.cgen import CWriter
    from opfuse.backends.c.isa.x86.core import once_lanes, once_value
    from opfuse.backends.c.isa.x86.helpers import PRELUDE

    if "avx512bw" not in CPU:
        pytest.skip("this CPU has no AVX-512BW")
    rng = np.random.default_rng(12)
    ms = rng.integers(2**30, 2**31 - 1, (64, 16))
    es = rng.integers(1, 32, (64, 16))
    xs = rng.integers(-(2**30) + 1, 2**30, (1024, 16))
    ties = (2 * ((1 << (30 + es)) - (1 << 30))) // ms  # near each lane's tie, both signs
    xs = np.concatenate([xs, np.clip(ties + rng.integers(-4, 4, ties.shape), -(2**30) + 1,
                                     2**30 - 1), -np.clip(ties, 0, 2**30 - 1)])
    w = CWriter(0)
    w.open("static int check(const int32_t *x, const int32_t *m, const int32_t *s, int zy, "
           "int lo)")
    w("const __m512i a = _mm512_loadu_si512((const void *)x), "
      "m0 = _mm512_loadu_si512((const void *)m), s0 = _mm512_loadu_si512((const void *)s);")
    once_lanes(w, 0)
    w(f"int32_t f[16], g[16]; _mm512_storeu_si512((void *)f, {once_value('a', 0, 'zy', 'lo', 100)});")
    w("_mm512_storeu_si512((void *)g, opfuse_x86_rq16(a, m0, s0, zy, lo, 100));")
    w("return memcmp(f, g, sizeof f) != 0;")
    w.close()

    def arr(name: str, a: np.ndarray) -> str:
        return (f"static const int32_t {name}[{a.size}] = {{" + ", ".join(map(str, a.ravel()))
                + "};\n")

    source = ("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n" + PRELUDE +
              "\n".join(w.lines) + "\n" + arr("XS", xs) + arr("MS", ms) + arr("SS", -es) +
              "int main(void) { int bad = 0;\n"
              f"for (int i = 0; i < {len(xs)}; ++i) for (int zy = -128; zy < 100; zy += 57)\n"
              "bad += check(XS + 16*i, MS + 16*(i % 64), SS + 16*(i % 64), zy, zy + (i & 1));\n"
              "printf(\"%d\\n\", bad); return 0; }\n")
    assert c_stdout(source, "opfuse-once16-") == "0"
