"""The Armv7E-M ISA module (Cortex-M4, M7 and every core with the DSP extension: docs/isa.md):
SIMD32 int8 products on 16-bit pairs, ``__smlad`` (ACLE, ``arm_acle.h``) two multiply-accumulates
per instruction, under ``#ifdef OPFUSE_DSP``, which ``PRELUDE`` defines from the compiler's own
``__ARM_FEATURE_DSP``/``__ARM_FEATURE_SIMD32`` (``-DOPFUSE_NO_DSP`` keeps the portable C).

The micro-kernels: ``dot.py`` (the dot products of one row and of the fully connected core),
``matrix.py`` (the im2col matrix tile and the weight layout it reads), ``depthwise.py`` (the
depthwise family's SIMD pairs and the SMMULR requantization), ``saturate8`` here; the kernel
families that use them are int8/conv_mcu.py, int8/gemm_mcu.py and int8/depthwise_dsp.py
(docs/architecture.md, "int8 matrix kernels on Cortex-M").
"""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.armv7em import matrix
from opfuse.backends.c.isa.armv7em.depthwise import FAST_REQUANT, PAIRS, SSAT_RANGE
from opfuse.backends.c.isa.armv7em.dot import dot, gemm_core, gemm_weights
from opfuse.backends.c.isa.base import IsaKernels

PRELUDE = """/* int8 dot products use the DSP extension's SMLAD where the core has it (Cortex-M4, M7;
   opfuse's armv7em ISA module, docs/isa.md); -DOPFUSE_NO_DSP keeps the portable C. */
#if defined(__ARM_FEATURE_DSP) && defined(__ARM_FEATURE_SIMD32) && !defined(OPFUSE_NO_DSP)
#include <arm_acle.h>
#define OPFUSE_DSP 1
#endif
"""


def saturate8(w: CWriter, value: str, ranged: bool) -> None:
    """``int32_t v``: ``value`` clamped to [-128, 127], one SSAT (``__ssat``: saturation to 8 bits
    is exactly that clamp); ``ranged``: ``SSAT_RANGE`` after it tells gcc the value's range, so a
    chain's own clamp to the same range folds away as after a clamp."""
    w("#ifdef OPFUSE_DSP")
    w(f"int32_t v = __ssat({value}, 8);")
    if ranged:
        w(SSAT_RANGE)
    w("#else")
    w(f"int32_t v = opfuse_clamp({value}, -128, 127);")
    w("#endif")


KERNELS = IsaKernels(name="armv7em", prelude=PRELUDE, dot=dot, saturate8=saturate8,
                     matrix_core=matrix.emit_core, matrix_weights=matrix.weight_rows,
                     gemm_core=gemm_core, gemm_weights=gemm_weights, depthwise_pairs=PAIRS,
                     fast_requant=FAST_REQUANT, member_functions=frozenset({"int8"}),
                     matrix_tail=True)
