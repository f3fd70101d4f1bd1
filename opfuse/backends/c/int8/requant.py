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

from opfuse.quant import ONNX, ROUNDING, TFLITE, get_quant

TFLITE_HELPER = r"""/* TFLite's MultiplyByQuantizedMultiplier (double rounding): x * m * 2^(s - 31). */
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
/* The same integer in fewer instructions on Armv7E-M, where the generator proved |x| < 2^30 and
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
static inline int32_t opfuse_clamp(int32_t v, int32_t lo, int32_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

"""

ONNX_HELPER = r"""/* ONNX requantization: x * scale in float32, rounded half to even. */
static inline int32_t opfuse_requant_f(int32_t x, float scale) {
    float v = rintf((float)x * scale);
    v = v < -1073741824.0f ? -1073741824.0f : (v > 1073741824.0f ? 1073741824.0f : v);
    return (int32_t)v;
}
static inline int32_t opfuse_quantize_f(float v) {
    v = rintf(v);
    v = v < -1073741824.0f ? -1073741824.0f : (v > 1073741824.0f ? 1073741824.0f : v);
    return (int32_t)v;
}
static inline int32_t opfuse_clamp(int32_t v, int32_t lo, int32_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}
/* QLinearAdd/Sub as onnxruntime computes it: each input dequantized in float, summed, divided
   by the output scale, rounded half to even. Kept free of fused multiply-adds, whatever the
   build flags, so every rounding is the one onnxruntime makes. */
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


def helpers(model: ir.Model) -> str:
    """The requantization helper model.c needs (empty for a float model)."""
    if not is_quantized(model):
        return ""
    if rounding_of(model) != TFLITE:
        return ONNX_HELPER
    from opfuse.backends.c.int8.softmax import RECIPROCAL

    softmax = any(n.op_type == "Softmax" for n in model.graph)
    return TFLITE_HELPER + (RECIPROCAL + "\n" if softmax else "")


def int8_info(model: ir.Model) -> dict | None:
    return {"rounding": rounding_of(model)} if is_quantized(model) else None
