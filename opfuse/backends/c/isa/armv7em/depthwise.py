"""Armv7E-M's micro-kernels of the int8 depthwise family (int8/depthwise_dsp.py, whose docstring
gives the arithmetic): the interior groups on SIMD32 pairs and TFLite's requantization in one
SMMULR, each under ``OPFUSE_DSP`` (isa/armv7em/__init__.py) with the portable C in its ``#else``.

A group's tap row is one word of four input bytes per even offset, widened by ``__sxtb16`` into
(x[q], x[q+2]) and, rotated by 8 bits, (x[q+1], x[q+3]); taps ``k`` and ``k + 2`` of an output
pixel pair with one of them in one ``__smlad``, an unpaired tap is one ``__smlabb``/``__smlatb``
(the schedule is the family's ``row_schedule``). The weights stay int8 in flash and are widened
and paired once per channel into registers.
"""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.base import PORTABLE_ROUND_F, DepthwisePairs, FastRequant
from opfuse.kernelplan.conv8 import PAIR, row_schedule, tap_pairs

ON, OFF = "#ifdef OPFUSE_DSP", "#ifndef OPFUSE_DSP"
SSAT_RANGE = "if (v < -128 || v > 127) __builtin_unreachable();"


def packed_weights(w: CWriter, g, guard: str) -> None:  # noqa: ANN001 - a ConvGeom
    """Channel ``c``'s taps ``wc`` widened and paired once: ``wp<kh>_<j>`` (pairs, then singles)."""
    kh_, kw_ = g.k
    pairs, singles_k = tap_pairs(kw_)
    w(guard)
    for kh in range(kh_):
        for j, (a, b) in enumerate(pairs):
            w(f"const int32_t wp{kh}_{j} = (int32_t)((uint32_t)(uint16_t)wc[{kh * kw_ + a}] | "
              f"((uint32_t)(uint16_t)wc[{kh * kw_ + b}] << 16));")
    for kh in range(kh_):
        for j, k in enumerate(singles_k, start=len(pairs)):
            w(f"const int32_t wp{kh}_{j} = wc[{kh * kw_ + k}];")
    w("#endif")


def row_pointers(w: CWriter, g, first: int) -> None:  # noqa: ANN001
    """Row pointers stepped, not indexed: fewer registers in the group loop."""
    (kh_, _), (_, sw), (_, pw) = g.k, g.s, g.p
    w(ON)
    for kh in range(kh_):
        w(f"const int8_t *p{kh} = r{kh} + {first * sw - pw};")
    w("#endif")


def group(w: CWriter, g, step: bool) -> None:  # noqa: ANN001
    """The sums ``a<d>`` of the group at ``ow``; ``step``: in a loop, whose row pointers step."""
    (kh_, kw_), (_, sw) = g.k, g.s
    taps = row_schedule(kw_, sw)
    words = sorted({t.word for t in taps})
    odd = {(t.word, t.odd) for t in taps}
    w(f"int32_t {', '.join(f'a{d} = bk0_{kw_}' for d in range(PAIR))};")
    for kh in range(kh_):
        w.open("")
        for q in words:
            w(f"int32_t t{q};")
            w(f"memcpy(&t{q}, p{kh} + {q}, 4);")
            if (q, False) in odd:
                w(f"const int32_t e{q} = __sxtb16(t{q});")
            if (q, True) in odd:  # one SXTB16 with its rotation (ACLE has no such intrinsic)
                w(f"int32_t o{q};")
                w(f'__asm__("sxtb16 %0, %1, ror #8" : "=r"(o{q}) : "r"(t{q}));')
        if step:
            w(f"p{kh} += {PAIR * sw};")
        for t in taps:
            src = f"{'o' if t.odd else 'e'}{t.word}"
            fn = {"pair": "__smlad", "lo": "__smlabb", "hi": "__smlatb"}[t.lane]
            w(f"a{t.out} = {fn}({src}, wp{kh}_{t.weight}, a{t.out});")
        w.close()


def constants(w: CWriter, dq, portable: Callable[[CWriter], None]) -> None:  # noqa: ANN001
    """A fast channel's constants: none for ``opfuse_requant_r``, ``opfuse_requant_d``'s shift
    ``qe`` and rounding constant ``qr`` = (1 + 2 z_y) 2^(e-1) mod 2^32 where z_y is folded in
    (``DwQuant.zy_folded``), else 2^(e-1); the portable constants in the ``#else``."""
    w(OFF)
    portable(w)
    if dq.doubled:
        w("#else")
        one = 1 + 2 * dq.zy if dq.zy_folded else 1
        w(f"const int qe = -qs; const int32_t qr = (int32_t)((uint32_t){one} << (-qs - 1));")
    w("#endif")


def clamp(w: CWriter, dq, acc: str, lo: int, hi: int, doubled: bool,  # noqa: ANN001
          portable: Callable[[CWriter], None]) -> None:
    """``int32_t v``: SMMULR's requantization of ``acc`` plus z_y, one SSAT for the int8 range
    (``SSAT_RANGE`` tells gcc its range, so a chain's clamp to it folds away)."""
    w(ON)
    if doubled:
        r = f"opfuse_requant_d(2*{acc}, qm, qe, qr)" + ("" if dq.zy_folded else f" + {dq.zy}")
    else:
        r = f"opfuse_requant_r({acc}, qm, qs) + {dq.zy}"
    int8 = (lo, hi) == (-128, 127)
    w(f"int32_t v = __ssat({r}, 8);" if int8 else f"int32_t v = opfuse_clamp({r}, {lo}, {hi});")
    w(SSAT_RANGE if int8 else "")
    w("#else")
    portable(w)
    w("#endif")


HELPERS = r"""/* The same integer in fewer instructions on Armv7E-M, where the generator proved |x| < 2^30 and
   s < 0 (common.py, acc_bound): floor((x*m + 2^30) / 2^31) is floor((2x*m + 2^31) / 2^32), one
   SMMULR; then the divide by 2^e (e = -s) rounding half away from zero is
   floor((h - (h < 0) + 2^(e-1)) / 2^e), two shifts apart so nothing overflows. Elsewhere the
   general helper (OPFUSE_REQUANT_R_PORTABLE: the same steps in C, for tests/test_requant_fast.py). */
static inline int32_t opfuse_requant_r(int32_t x, int32_t m, int s) {
#if defined(OPFUSE_DSP)
    int32_t h;
    __asm__ ("smmulr %0, %1, %2" : "=r" (h) : "r" (x * 2), "r" (m));
    return (((h + (h >> 31)) >> (-1 - s)) + 1) >> 1;
#elif defined(OPFUSE_REQUANT_R_PORTABLE)
    const int32_t h = (int32_t)(((int64_t)(x * 2) * m + ((int64_t)1 << 31)) >> 32);
    return (((h + (h >> 31)) >> (-1 - s)) + 1) >> 1;
#else
    return opfuse_requant(x, m, s);
#endif
}
#if defined(OPFUSE_DSP) || defined(OPFUSE_REQUANT_R_PORTABLE)
/* opfuse_requant_r for a kernel that accumulated 2x already (doubled weights and bias, the
   depthwise core) with -31 <= s <= -1: the two shifts after the multiply become one, since
   ((a >> (e-1)) + 1) >> 1 == (a + 2^(e-1)) >> e for e = -s, and |h| <= |x| < 2^30 keeps the sum
   in 32 bits; r is 2^(e-1), plus z*2^e where the generator proved that fits too (it adds the
   output zero point z exactly). */
static inline int32_t opfuse_requant_d(int32_t x2, int32_t m, int e, int32_t r) {
#if defined(OPFUSE_DSP)
    int32_t h;
    __asm__ ("smmulr %0, %1, %2" : "=r" (h) : "r" (x2), "r" (m));
#else
    const int32_t h = (int32_t)(((int64_t)x2 * m + ((int64_t)1 << 31)) >> 32);
#endif
    return (h + (h >> 31) + r) >> e;
}
#endif
"""

# ONNX's rounding (FastRequant.onnx): VCVTR converts by FPSCR's rounding mode, round half to even
# unless a program changes it, and rintf rounds by the same mode, so one VCVTR is rintf and the
# conversion (rintf is VRINTX + VCVT on FPv5, a libm call on Cortex-M4's FPv4). Where the value
# leaves int32 VCVTR saturates, and the clamp to +-2^30 after it gives what the float clamps
# gave; where the generator proved |v| < 2^29 there is no clamp. The QLinearAdd helper inline.
ONNX_ROUND = r"""#if defined(__ARM_FP) && (__ARM_FP & 4) && defined(__GNUC__)
static inline int32_t opfuse_quantize_fr(float v) {
    union { float f; int32_t i; } r;
    __asm__ ("vcvtr.s32.f32 %0, %1" : "=t" (r.f) : "t" (v));
    return r.i;
}
static inline int32_t opfuse_quantize_f(float v) {
    return opfuse_clamp(opfuse_quantize_fr(v), -1073741824, 1073741824);
}
/* QLinearAdd/Sub (requant.py's opfuse_qadd_f) inline: each product passes through an empty asm
   that holds it in an S register, so no build flag contracts it into the sum's VFMA */
#define OPFUSE_QADD_F 1
static inline int32_t opfuse_qadd_f(int32_t a, float sa, int32_t b, float sb, float so) {
    float fa = (float)a * sa, fb = (float)b * sb;
    __asm__ ("" : "+t" (fa));
    __asm__ ("" : "+t" (fb));
    return opfuse_quantize_f((fa + fb) / so);
}
#else
""" + PORTABLE_ROUND_F + "#endif\n"

PAIRS = DepthwisePairs(on=ON, off=OFF, weights_guard=ON, weights=packed_weights,
                       pointers=row_pointers, group=group)
FAST_REQUANT = FastRequant(helpers=HELPERS, constants=constants, clamp=clamp, onnx=ONNX_ROUND)
