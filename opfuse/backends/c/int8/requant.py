"""The one requantization helper of an int8 model, per rounding mode (docs/architecture.md,
"int8 in the IR"), and the model-level facts the int8 kernels share.

``tflite``: ``opfuse_requant(x, multiplier, shift)`` is TFLite's MultiplyByQuantizedMultiplier
with TFLite Micro's default double rounding: a saturating rounding doubling high multiply by the
Q31 multiplier (after a left shift for positive shifts), then a rounding divide by a power of two
(ties away from zero). The left shift wraps in 32 bits as TFLite's does (through uint32, so it is
defined behaviour, not signed overflow).

On x86 the rounding divide's last shift is done in 64 bits: gcc 12.2 at -O3 with AVX-512
(``-march=native`` on this Zen 4) vectorizes ``clamp((srdhm(x, m) >> e) + z)`` stored to int8 by
truncating the high product to 16 bits before a 16-bit ``vpsraw``, though it needs 17: a
squeeze-excite Mul member of a cascade (one row of 12 columns, fully unrolled and SLP-vectorized)
wrapped 156 to -100 instead of clamping it to 127. The 64-bit shift is the same integer and
keeps the vectorizer from narrowing it; Arm builds keep the 32-bit ``asr`` (a 64-bit shift by a
per-channel amount costs a Cortex-M several instructions), and arm-none-eabi-gcc does not
vectorize for Cortex-M4/M7.

``onnx``: ``opfuse_requant_f(x, scale)`` is the float form: x * scale in float32, rounded half to
even (rintf in the default rounding mode), as onnxruntime's requantization.
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.backends.c.isa import IsaKernels
from opfuse.backends.c.isa.portable import REQUANT_TFLITE
from opfuse.quant import ONNX, ROUNDING, TFLITE, get_quant

# opfuse_clamp, after the ISA's fast form (IsaKernels.fast_requant)
CLAMP = r"""static inline int32_t opfuse_clamp(int32_t v, int32_t lo, int32_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

"""


def tflite_helper(isa: IsaKernels) -> str:
    """TFLite's requantization helpers with the ISA's fast form of ``opfuse_requant_r``."""
    return REQUANT_TFLITE + isa.fast_requant.helpers + CLAMP


def onnx_helper(isa: IsaKernels) -> str:
    """ONNX's requantization helpers with the ISA's rounding (``FastRequant.onnx``)."""
    return CLAMP + isa.fast_requant.onnx + ONNX_HELPER


ONNX_HELPER = r"""/* ONNX requantization: x * scale in float32, rounded half to even; _fr where the generator
   proved |x * scale| < 2^29 (common.py, Requant.ranged), so no clamp can act. */
static inline int32_t opfuse_requant_f(int32_t x, float scale) {
    return opfuse_quantize_f((float)x * scale);
}
static inline int32_t opfuse_requant_fr(int32_t x, float scale) {
    return opfuse_quantize_fr((float)x * scale);
}
/* QLinearAdd/Sub as onnxruntime computes it: each input dequantized in float, summed, divided
   by the output scale, rounded half to even. Kept free of fused multiply-adds, whatever the
   build flags, so every rounding is the one onnxruntime makes (an ISA whose rounding helpers
   define OPFUSE_QADD_F keeps it so inline: FastRequant.onnx). */
#ifndef OPFUSE_QADD_F
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
__attribute__((noinline, unused))
#endif
static int32_t opfuse_qadd_f(int32_t a, float sa, int32_t b, float sb, float so) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    const float fa = (float)a * sa;
    const float fb = (float)b * sb;
    return opfuse_quantize_f((fa + fb) / so);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
#endif

"""


def is_quantized(model: ir.Model) -> bool:
    """Whether any value of the model carries quantization parameters or an 8-bit dtype (the
    frontend records ``ROUNDING`` on every model, float ones too, so it proves nothing)."""
    for node in model.graph:
        for v in (*node.inputs, *node.outputs):
            if v is not None and (get_quant(v) is not None
                                  or v.dtype in (ir.DataType.INT8, ir.DataType.UINT8)):
                return True
    return False


def rounding_of(model: ir.Model) -> str:
    mode = model.meta.get(ROUNDING, TFLITE)
    return mode if mode in (TFLITE, ONNX) else TFLITE


def helpers(model: ir.Model, isa: IsaKernels) -> str:
    """The requantization helper model.c needs (empty for a float model)."""
    if not is_quantized(model):
        return ""
    if rounding_of(model) != TFLITE:
        return onnx_helper(isa)
    from opfuse.backends.c.int8.softmax import RECIPROCAL

    softmax = any(n.op_type == "Softmax" for n in model.graph)
    return tflite_helper(isa) + (RECIPROCAL + "\n" if softmax else "")


def int8_info(model: ir.Model) -> dict | None:
    return {"rounding": rounding_of(model)} if is_quantized(model) else None
