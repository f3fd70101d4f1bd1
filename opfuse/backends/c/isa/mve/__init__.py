"""The Helium ISA module (Armv8.1-M with the M-profile Vector Extension: Cortex-M55, M85;
docs/isa.md): 128-bit integer vectors, ``vmladavaq`` (ACLE, ``arm_mve.h``) summing 8 int16 or
16 int8 products into one int32 per instruction, under ``#ifdef OPFUSE_MVE``, which ``PRELUDE``
defines from the compiler's own ``__ARM_FEATURE_MVE`` (bit 0: the integer vector instructions;
``-DOPFUSE_NO_MVE`` keeps the other C). Such a core also has the DSP extension, so the prelude
keeps armv7em's ``OPFUSE_DSP`` and every kernel not written here (depthwise pairs, SMMULR
requantization, SSAT) runs as on Cortex-M4/M7.

The micro-kernels: ``matrix.py`` (the im2col matrix tile over the int16 scratch, and the weight
layout it reads: natural order, no SMLAD permutation), ``narrow.py`` (the same tile over an int8
scratch for int8 inputs, 16 products a VMLADAV, with its fill's channel runs), ``output.py`` (its output stage, four
pixels of a channel a vector), ``depthwise.py`` (the depthwise conv's interior
columns, four pixels a vector), ``eltwise.py`` (int8 Add/Sub, four elements a vector), ``fill.py`` (the im2col
fill's channel runs, eight a gather)
and ``gemm.py`` (the fully connected core:
16 int8 lanes a step, tail-predicated with ``vctp8q``). Every product and partial sum is exact
in int32, as SMLAD's, so the integers are the same as every other ISA's.
"""

from __future__ import annotations

from dataclasses import replace

from opfuse.backends.c.isa import armv7em
from opfuse.backends.c.isa.base import IsaKernels, NarrowMatrix
from opfuse.backends.c.isa.mve import narrow
from opfuse.backends.c.isa.mve.depthwise import depthwise_row
from opfuse.backends.c.isa.mve.eltwise import elementwise_add
from opfuse.backends.c.isa.mve.fill import fill_gather
from opfuse.backends.c.isa.mve.floatconv import conv_float
from opfuse.backends.c.isa.mve.gemm import gemm_core
from opfuse.backends.c.isa.mve.matrix import emit_core, weight_rows
from opfuse.backends.c.isa.mve.output import store_tile

PRELUDE = armv7em.PRELUDE + """/* int8 matrix and fully connected cores use Helium (MVE) where the core has it (Cortex-M55;
   opfuse's mve ISA module, docs/isa.md); -DOPFUSE_NO_MVE keeps the C above. */
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1) && !defined(OPFUSE_NO_MVE)
#include <arm_mve.h>
#define OPFUSE_MVE 1
/* A predicate as the kernels write it, through a register: gcc 12.2 miscompiles a constant
   mve_pred16_t (0x00ff was loaded as 0xffffffff: every lane on). */
static inline mve_pred16_t opfuse_pred(uint32_t m) {
    __asm__ ("" : "+r" (m));
    return (mve_pred16_t)m;
}
/* float convs on MVE's float vectors (bit 1: MVE-F; isa/mve/floatconv.py); OPFUSE_LDRD loads
   two adjacent floats into core registers in one LDRD (gcc 12.2 splits a 64-bit load it could
   pair into two LDRs), the scalar operands of VFMA (vector by scalar); its memory operand is
   the 1020 bytes LDRD's offset reaches from p, so gcc forms no address per load */
#if __ARM_FEATURE_MVE & 2
#define OPFUSE_MVEF 1
#define OPFUSE_LDRD(a, b, p, off) __asm__ volatile ("ldrd %0, %1, [%2, #" #off "]" : "=r" (a), "=r" (b) \\
    : "r" (p), "m" (*(const float (*)[256])(p)))
/* v = v <cmp> bound ? bound : v in four lanes (cmp "lt": a lower bound, "gt": an upper one), so
   NaN stays as in the scalar chain: one VCMP and one VPSEL (vpselq_f32 on vcmpltq_n_f32's
   predicate took five: gcc 12.2 moves the predicate through a core register) */
#define OPFUSE_CLAMPF(v, cmp, bound) do { const float32x4_t opfuse_bv = vdupq_n_f32(bound); \\
    __asm__ ("vcmp.f32 " cmp ", %q0, %q1\\n\\tvpsel %q0, %q1, %q0" : "+w" (v) \\
             : "w" (opfuse_bv) : "p0"); } while (0)
#endif
#endif
"""

KERNELS = IsaKernels(name="mve", prelude=PRELUDE, dot=armv7em.dot, saturate8=armv7em.saturate8,
                     matrix_core=emit_core, matrix_weights=weight_rows, gemm_core=gemm_core,
                     store_tile=store_tile, depthwise_row=depthwise_row,
                     elementwise_add=elementwise_add, fill_gather=fill_gather,
                     narrow=NarrowMatrix(quad=narrow.QUAD8, pad=narrow.pad, core=narrow.emit_core,
                                         fill_gather=narrow.fill_gather),
                     member_functions=frozenset({"int8", "float"}), depthwise_row_guard="#ifdef OPFUSE_MVE",
                     # the DSP pairs stay the row's #else: their packed weights are not built
                     # where the MVE row replaces them
                     depthwise_pairs=replace(armv7em.PAIRS, weights_guard=(
                         "#if defined(OPFUSE_DSP) && !defined(OPFUSE_MVE)")),
                     fast_requant=armv7em.FAST_REQUANT, conv_float=conv_float)
