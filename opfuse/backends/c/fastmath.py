"""Branch-free float32 exp, erf, tanh and sigmoid for the generated C (docs/architecture.md,
"The C backend").

libm's ``expf``/``erff``/``tanhf`` are calls gcc cannot vectorize (without -ffast-math and a
vector math library), so a Softmax row or a GELU epilogue ran one element at a time. These are
``static inline`` C functions made of multiplies, adds and selects only (``opfuse_selectf``,
isa/portable.py: every compare and operand computed unconditionally, one of two floats chosen by
the compare's bits; gcc 12 if-converted ``a < b ? c : d`` into blends with AVX-512's masks but
not on AVX2 or SSE, where Ultraface's exp loop stayed scalar): a loop calling them vectorizes
like any arithmetic loop, and on a
Cortex-M with a single-precision FPU (no vector unit) the build calls libm instead
(``OPFUSE_SCALAR_MATH``, below). ``used(text)`` returns the definitions the kernels' text calls
(and those they call), placed once before the kernels.

How (formulas are textbook; every coefficient here was computed for opfuse):

- exp: x = n ln2 + r, n = round(x / ln2) by the 1.5 * 2^23 rounding constant (the integer lands in
  the low mantissa bits, read through memcpy: no float-to-int conversion, whose NaN case is
  undefined behaviour), r by Cody and Waite's two-part ln2 (the high part has 16 significant bits,
  so n * hi is exact), exp(r) by a degree-6 polynomial, 2^n written into the exponent field. The
  argument is clamped so 2^n is a normal float; below ln(2^-126) the result is 0 (libm returns
  subnormals there), above ln(FLT_MAX) it is +inf, NaN propagates.
- erf: |x| <= 1: x * P(x^2) (degree 6 in x^2); 1 < |x| <= 4: 1 - exp(-x^2) * Q(1/x) with
  Q ~ erfc(x) exp(x^2) (degree 7 in 1/x); beyond 4 erf is 1 in float32. Both pieces are computed
  and one is selected.
- tanh: |x| < 0.5: x * T(x^2) (degree 5 in x^2), else (1 - e) / (1 + e) with e = exp(-2|x|),
  which has no cancellation there; the sign copied back.
- sigmoid: 1 / (1 + exp(-x)).

Every polynomial is the Chebyshev interpolant on its interval (numpy.polynomial.Chebyshev
.interpolate, against scipy.special's erf/erfc for erf) converted to the power basis and rounded
to float32; the interpolants' own errors are below 3e-9 relative (exp, erf |x| <= 1, tanh) and
1.2e-9 absolute (erf's tail), so float32 rounding dominates. Measured over a dense sweep against
float64 references (``tests/test_c_fastmath.py`` holds the bounds; measured maxima with gcc 12,
-O3 -ffp-contract=fast, x86-64 with and without -march=native): exp 1.3 ulp (bound 2), erf 1.4e-7
absolute and 2.4 ulp (bounds 2e-7 and 3; Abramowitz and Stegun 7.1.26 is 1.5e-7 absolute and
has no relative accuracy near 0), tanh 2.4 ulp and sigmoid 2.3 ulp (bound 3). libm's float32
functions are within 1 ulp; onnxruntime's own vectorized kernels are approximations as well.
"""

from __future__ import annotations

import re

from opfuse.backends.c.isa.portable import SCALAR_MATH, SELECTF

# the Chebyshev interpolants of the module docstring in the power basis, highest degree first
EXP_POLY = ("0.00139411085f", "0.00837512594f", "0.0416663513f", "0.166664153f", "0.5f", "1.0f",
            "1.0f")  # exp(r), in r
ERF_NEAR = ("7.87587487e-05f", "-0.00080168643f", "0.00518908724f", "-0.0268542115f",
            "0.112835944f", "-0.37612626f", "1.12837911f")  # erf(x) / x, in x^2
ERF_TAIL = ("-0.0196050294f", "0.128479451f", "-0.368562549f", "0.589897156f", "-0.513899148f",
            "0.0535994954f", "0.55729264f", "0.0003815323f")  # erfc(x) exp(x^2), in 1/x
TANH_NEAR = ("-0.00661201403f", "0.0212738216f", "-0.0538932234f", "0.133329004f",
             "-0.333333254f", "1.0f")  # tanh(x) / x, in x^2


def _horner(acc: str, x: str, coeffs: tuple[str, ...]) -> str:
    """C lines evaluating the polynomial ``coeffs`` (highest degree first) at ``x`` into the float
    ``acc`` by Horner's rule, one multiply-add a line (the form gcc contracts into FMAs)."""
    lines = [f"    float {acc} = {coeffs[0]};\n"]
    for c in coeffs[1:]:
        sign, mag = ("-", c[1:]) if c.startswith("-") else ("+", c)
        lines.append(f"    {acc} = {acc} * {x} {sign} {mag};\n")
    return "".join(lines)


EXP = """\
/* exp(x), branch-free (opfuse/backends/c/fastmath.py): within 2 ulp of exp in float32. */
static inline float opfuse_expf(float x) {
    const float c0 = opfuse_selectf(x < -87.3365448f, -87.3365448f, x);
    const float c = opfuse_selectf(c0 > 88.7228394f, 88.7228394f, c0);
    const float t = c * 1.44269504f + 12582912.0f; /* round(c / ln2) in the low mantissa bits */
    const float n = t - 12582912.0f;
    const float r = (c - n * 0.693145752f) - n * 1.42860677e-06f;
""" + _horner("p", "r", EXP_POLY) + """\
    /* 2^128 is no float: near ln(FLT_MAX) the last factor 2 goes into p */
    const int big = n > 127.0f;
    const float k = opfuse_selectf(big, 127.0f, n);
    const float q = p * opfuse_selectf(big, 2.0f, 1.0f);
    const float kt = k + 12582912.0f;
    uint32_t bits;
    memcpy(&bits, &kt, sizeof bits);
    bits = (bits - 0x4B400000u + 127u) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    float y = q * s;
    y = opfuse_selectf(x < -87.3365448f, 0.0f, y);
    y = opfuse_selectf(x > 88.7228394f, INFINITY, y);
    return y;
}
"""

ERF = """\
/* erf(x), branch-free (opfuse/backends/c/fastmath.py): within 2e-7 and 3 ulp of erf. */
static inline float opfuse_erff(float x) {
    const float a0 = fabsf(x);
    const float a1 = opfuse_selectf(a0 < 1.0f, 1.0f, a0);
    const float a = opfuse_selectf(a1 > 4.0f, 4.0f, a1);
    const float u = x * x;
""" + _horner("p", "u", ERF_NEAR) + """\
    const float s = 1.0f / a;
""" + _horner("g", "s", ERF_TAIL) + """\
    const float tail = copysignf(1.0f - opfuse_expf(-a * a) * g, x);
    return opfuse_selectf((a0 <= 1.0f) | (a0 != a0), x * p, tail);
}
"""

TANH = """\
/* tanh(x), branch-free (opfuse/backends/c/fastmath.py): within 3 ulp of tanh. */
static inline float opfuse_tanhf(float x) {
    const float a = fabsf(x);
    const float u = x * x;
""" + _horner("p", "u", TANH_NEAR) + """\
    const float e = opfuse_expf(-2.0f * a);
    const float big = copysignf((1.0f - e) / (1.0f + e), x);
    return opfuse_selectf((a < 0.5f) | (a != a), x * p, big);
}
"""

SIGMOID = """\
/* 1 / (1 + exp(-x)) (opfuse/backends/c/fastmath.py): within 3 ulp of the logistic function. */
static inline float opfuse_sigmoidf(float x) {
    return 1.0f / (1.0f + opfuse_expf(-x));
}
"""

# name -> (definition, the functions it calls), in definition order
FUNCTIONS = {
    "opfuse_expf": (EXP, ()),
    "opfuse_erff": (ERF, ("opfuse_expf",)),
    "opfuse_tanhf": (TANH, ("opfuse_expf",)),
    "opfuse_sigmoidf": (SIGMOID, ("opfuse_expf",)),
}
# A Cortex-M without MVE has no vector unit: nothing vectorizes there, and newlib's branchy
# functions execute fewer instructions (kws_transformer on cortex-m7 under QEMU: its erf GELU
# kernel 1,191,189 instructions with erff, 2,027,547 with opfuse_erff), so those builds call libm.
INCLUDE = "#include <stdint.h>\n" + SCALAR_MATH
LIBM = {
    "opfuse_expf": "expf(x)",
    "opfuse_erff": "erff(x)",
    "opfuse_tanhf": "tanhf(x)",
    "opfuse_sigmoidf": "1.0f / (1.0f + expf(-x))",
}


def used(text: str) -> str:
    """The definitions ``text`` calls (with their dependencies), or "" when it calls none."""
    wanted = {name for name in FUNCTIONS if re.search(rf"\b{name}\(", text)}
    for name in list(wanted):
        wanted.update(FUNCTIONS[name][1])
    if not wanted:
        return ""
    names = [name for name in FUNCTIONS if name in wanted]
    scalar = "".join(f"static inline float {n}(float x) {{ return {LIBM[n]}; }}\n" for n in names)
    fast = SELECTF + "\n".join(FUNCTIONS[n][0] for n in names)
    return f"{INCLUDE}#if OPFUSE_SCALAR_MATH\n{scalar}#else\n{fast}#endif\n"
