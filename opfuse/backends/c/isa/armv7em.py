"""The Armv7E-M ISA module (Cortex-M4, M7 and every core with the DSP extension: docs/isa.md):
SIMD32 int8 products on 16-bit pairs, ``__smlad`` (ACLE, ``arm_acle.h``) two multiply-accumulates
per instruction, under ``#ifdef OPFUSE_DSP``, which ``PRELUDE`` defines from the compiler's own
``__ARM_FEATURE_DSP``/``__ARM_FEATURE_SIMD32`` (``-DOPFUSE_NO_DSP`` keeps the portable C).

``dot``, four bytes at a time: ``__sxtb16`` widens bytes 0 and 2 to two int16 lanes, and again
after a rotation by 8 bits bytes 1 and 3 (``__uxtb16`` for uint8 activations); the activation's
zero point is taken off both lanes with ``__ssub16`` (x - z stays within [-255, 255]); the
weights (int8, zero point 0) are widened the same way, so the lanes pair up and ``__smlad`` adds
both products to the accumulator. The portable loop finishes the tail and serves any other core;
both give the same int32 sum: the products and partial sums are exact in 32 bits.
"""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa import portable
from opfuse.backends.c.isa.base import IsaKernels

PRELUDE = """/* int8 dot products use the DSP extension's SMLAD where the core has it (Cortex-M4, M7;
   opfuse/backends/c/isa/armv7em.py); -DOPFUSE_NO_DSP keeps the portable C. */
#if defined(__ARM_FEATURE_DSP) && defined(__ARM_FEATURE_SIMD32) && !defined(OPFUSE_NO_DSP)
#include <arm_acle.h>
#define OPFUSE_DSP 1
#endif
"""


def dot(w: CWriter, acc: str, a: str, a_ctype: str, za: int, b: str, k: int) -> None:
    """``acc += sum((a[kk] - za) * b[kk]) for kk < k``; ``b`` is int8 (zero point 0)."""
    if k < 4 or a_ctype not in ("int8_t", "uint8_t"):
        portable.dot(w, acc, a, a_ctype, za, b, k)
        return
    widen = "__sxtb16" if a_ctype == "int8_t" else "__uxtb16"
    lanes = (za & 0xFFFF) | ((za & 0xFFFF) << 16)
    w("int kk = 0;")
    w("#ifdef OPFUSE_DSP")
    w.open(f"for (; kk + 4 <= {k}; kk += 4)")
    w("int32_t a4, b4;")
    w(f"memcpy(&a4, {a} + kk, 4);")
    w(f"memcpy(&b4, {b} + kk, 4);")
    w("int32_t a4r = (int32_t)(((uint32_t)a4 >> 8) | ((uint32_t)a4 << 24));  /* ror 8 */")
    w("int32_t b4r = (int32_t)(((uint32_t)b4 >> 8) | ((uint32_t)b4 << 24));")
    w(f"int16x2_t ae = {widen}(a4), ao = {widen}(a4r);")
    if za:
        w(f"ae = __ssub16(ae, (int16x2_t)0x{lanes:08x}u);")
        w(f"ao = __ssub16(ao, (int16x2_t)0x{lanes:08x}u);")
    w(f"{acc} = __smlad(ae, __sxtb16(b4), {acc});")
    w(f"{acc} = __smlad(ao, __sxtb16(b4r), {acc});")
    w.close()
    w("#endif")
    portable.dot_tail(w, acc, a, za, b, k)


KERNELS = IsaKernels(name="armv7em", prelude=PRELUDE, dot=dot)
