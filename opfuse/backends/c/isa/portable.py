"""The portable ISA module: plain C99 that any compiler vectorizes as it can (docs/isa.md). Its
writers are every other module's fallback, under their ``#else``."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.base import IsaKernels


def dot(w: CWriter, acc: str, a: str, a_ctype: str, za: int, b: str, k: int) -> None:
    """``acc += sum((a[kk] - za) * b[kk]) for kk < k``; ``b`` is int8 (zero point 0)."""
    del a_ctype  # one loop for int8 and uint8 activations
    w(f"for (int kk = 0; kk < {k}; ++kk) {acc} += ((int32_t){a}[kk] - {za}) * {b}[kk];")


def dot_tail(w: CWriter, acc: str, a: str, za: int, b: str, k: int) -> None:
    """The steps ``kk .. k`` a vector loop left (``kk`` declared by it)."""
    w(f"for (; kk < {k}; ++kk) {acc} += ((int32_t){a}[kk] - {za}) * {b}[kk];")


def saturate8(w: CWriter, value: str, ranged: bool) -> None:
    """``int32_t v``: ``value`` clamped to [-128, 127]."""
    del ranged  # the clamp itself tells the compiler the range
    w(f"int32_t v = opfuse_clamp({value}, -128, 127);")


# TFLite's MultiplyByQuantizedMultiplier as every ISA's general helper (int8/requant.py); the
# rounding divide's last shift in 64 bits on x86 (requant.py says why)
REQUANT_TFLITE = r"""/* TFLite's MultiplyByQuantizedMultiplier (double rounding): x * m * 2^(s - 31). */
static inline int32_t opfuse_srdhm(int32_t a, int32_t b) {
    if (a == b && a == INT32_MIN) return INT32_MAX;
    /* TFLite rounds (a*b + nudge) / 2^31 toward zero with nudge 2^30 or 1 - 2^30 by the sign
       of a*b; that is always floor((a*b + 2^30) / 2^31), an add and an arithmetic shift. */
    return (int32_t)(((int64_t)a * (int64_t)b + ((int64_t)1 << 30)) >> 31);
}
static inline int32_t opfuse_rdbpot(int32_t x, int e) {
    const int32_t mask = (int32_t)(((int64_t)1 << e) - 1);
    const int32_t rem = x & mask;
    const int32_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
#if defined(__x86_64__) || defined(__i386__)
    /* shifted in 64 bits on x86: gcc 12's vectorizer narrows a 32-bit shift here to 16 bits
       (wrong code under AVX-512, see requant.py) */
    return (int32_t)(((int64_t)x >> e) + (rem > thr ? 1 : 0));
#else
    return (x >> e) + (rem > thr ? 1 : 0);
#endif
}
static inline int32_t opfuse_requant(int32_t x, int32_t m, int s) {
    const int ls = s > 0 ? s : 0;
    return opfuse_rdbpot(opfuse_srdhm((int32_t)((uint32_t)x << ls), m), s > 0 ? 0 : -s);
}
"""


# Every kernel's function attribute (emit.py: OPFUSE_KERNEL), by the compiler and core that build
# the project
KERNEL_ATTRIBUTE = """/* Kernels stay functions on Arm: inlined into the invoke, arm-none-eabi-gcc 12 -O2 compiled the
   same depthwise kernel of kws_ref_model into 57% more instructions in its cascaded build.
   noipa, not just noinline: a kernel called once with constant arena addresses is otherwise
   cloned by IPA-CP with those addresses folded in, and arm-none-eabi-gcc 12.2 -O2 then
   miscompiles the clone of a Transpose: ivopts addresses its load as MEM[0B + index],
   local-pure-const reads that as a NULL dereference, stops scanning the loop before its store
   and declares the clone const, and DCE deletes its call from the invoke (a depthwise layer
   then read a stale arena). noipa keeps each kernel opaque to its caller, as a kernel library
   compiled apart is: no clone, no inferred const/pure or modref summary. GCC >= 8; a compiler
   without noipa (clang) keeps noinline. */
#if defined(__GNUC__) && defined(__arm__)
#if defined(__has_attribute)
#if __has_attribute(noipa)
#define OPFUSE_KERNEL __attribute__((noipa))
#endif
#endif
#ifndef OPFUSE_KERNEL
#define OPFUSE_KERNEL __attribute__((noinline))
#endif
#else
#define OPFUSE_KERNEL
#endif

"""

# fastmath.py: libm or opfuse's branch-free float math, by the core (fastmath.py says why)
SCALAR_MATH = """\
#ifndef OPFUSE_SCALAR_MATH
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M' && !defined(__ARM_FEATURE_MVE)
#define OPFUSE_SCALAR_MATH 1
#else
#define OPFUSE_SCALAR_MATH 0
#endif
#endif
"""

# fastmath.py's select, m ? a : b, whichever way the core's compiler vectorizes or schedules it:
# by the bits elsewhere, since gcc 12 if-converted a loop of ``a < b ? c : d`` into blends with
# AVX-512's masks but left it scalar on AVX2 and SSE (Ultraface's exp loop); the ternary on an
# M-profile core (cortex-m55's MVE build does not vectorize the loop either way; there the
# ternary is a VSEL, the bits four more instructions)
SELECTF = """\
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
static inline float opfuse_selectf(int m, float a, float b) { return m ? a : b; }
#else
static inline float opfuse_selectf(int m, float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    const uint32_t mask = 0u - (uint32_t)m, r = (ua & mask) | (ub & ~mask);
    float f;
    memcpy(&f, &r, sizeof f);
    return f;
}
#endif
"""


KERNELS = IsaKernels(name="portable", prelude="", dot=dot, saturate8=saturate8)
