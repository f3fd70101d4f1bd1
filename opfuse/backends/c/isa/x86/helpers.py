"""The C helpers of the x86 int8 micro-kernels (x86/core.py), written once at the top of model.c
when a kernel uses them (``prelude``): ``immintrin.h`` and the helpers under the compiler's own
feature macros, so one generated project builds on any x86 (and on any other compiler, which
sees none of it).

* ``opfuse_x86_dot16`` / ``opfuse_x86_dot8``: ``acc[l] += sum_{b<4} u8(x[4l+b]) * s8(w[4l+b])``
  in int32 lanes (wrapping, as int32 sums do). VNNI: one ``vpdpbusd`` (zmm or ymm; AVX-VNNI or
  AVX-512VL spell the ymm one differently). The zmm one is inline asm under gcc (clang keeps the
  intrinsic): its accumulator is tied to the instruction's destination (``"+v"``), where gcc 12,
  given the intrinsic, copied each accumulator to a fresh register around every ``vpdpbusd``
  of a block (and spilled them at 16 and more); the asm's two spellings are AT&T's and
  Intel's, so ``-masm=intel`` builds too. AVX2: the bytes of each 16-bit half split into even
  and odd int16 lanes (x zero-extended, w sign-extended) and two ``vpmaddwd``: every product
  and each pair sum is exact in int32 (|255 * 128 * 2| < 2^31; ``vpmaddubsw``'s int16
  saturation would not be).
* ``opfuse_x86_fma16``: ``acc + s * v`` in one zmm ``vfmadd231ps``, the float FMA tiles' step
  (x86/fma_tile.py). Inline asm under gcc with every operand in a register (``"v"``): given the
  intrinsic, gcc 12 sometimes kept a tile's operand vectors on the stack and read them from there
  in every FMA (light_resnet50's 128 -> 512 expand + Add: 1.71 ms, 0.94 ms with its operands in
  registers, the same C in another binary layout); the product is the same, so is every sum.
* ``opfuse_x86_rq16`` / ``opfuse_x86_rq8`` (``rq16r`` / ``rq8r`` their short forms): TFLite's MultiplyByQuantizedMultiplier as
  requant.py's ``opfuse_requant`` computes it, lane by lane: the left shift through uint32, the
  saturating rounding doubling high multiply as (x*m + 2^30) >> 31 in 64 bits (m is never
  INT32_MIN: the generator checks), the rounding divide by 2^e with ties away from zero; then
  + z_y and the clamp. The same integers for every input, so the result is bit-exact.
"""

from __future__ import annotations

NO = "!defined(OPFUSE_NO_X86_SIMD)"
ZMM = f"{NO} && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)"
YMM_VNNI = f"{NO} && (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))"
AVX2 = f"{NO} && defined(__AVX2__)"
Z512 = f"{NO} && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__BMI2__)"
ANY = AVX2  # every branch above implies AVX2 on a real compiler; the guard of shared code
MARK = "opfuse_x86_"  # every helper's prefix: a kernel that names one needs the prelude

# ``OPFUSE_X86_KEEP(a)``, defined in a kernel's AVX2 branch (core.py; not in the prelude, which
# every x86 model.c carries): an empty asm that holds an accumulator in its register after each
# step (gcc 12 summed a block's products in trees and kept its sums on the stack: ResNet-8's
# AVX2 3x3 core spilled 16 ymm a step). Indented lines: conv._assemble's branches are at column 0.
KEEP = ("#if defined(__GNUC__)", '#define OPFUSE_X86_KEEP(v) __asm__("" : "+x"(v))', "#else",
        "#define OPFUSE_X86_KEEP(v) (void)(v)", "#endif")

PRELUDE = rf"""/* x86 int8 micro-kernels (opfuse/backends/c/isa/x86/core.py): AVX-512 VNNI, AVX-VNNI or
   AVX2 by the compiler's own feature macros; -DOPFUSE_NO_X86_SIMD keeps the portable C. */
#if {ANY}
#include <immintrin.h>
static inline int32_t opfuse_x86_ld32(const uint8_t *p) {{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}}
static inline __m256i opfuse_x86_dot8(__m256i acc, __m256i x, __m256i w) {{
#if defined(__AVXVNNI__) && !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
    return _mm256_dpbusd_avx_epi32(acc, x, w);
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, x, w);
#else
    const __m256i lo = _mm256_set1_epi16(0x00ff);
    const __m256i xe = _mm256_and_si256(x, lo), xo = _mm256_srli_epi16(x, 8);
    const __m256i we = _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8);
    const __m256i wo = _mm256_srai_epi16(w, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(xe, we),
                                                  _mm256_madd_epi16(xo, wo)));
#endif
}}
static inline __m256i opfuse_x86_rq8(__m256i x, __m256i m, __m256i s, int32_t zy, int32_t lo,
                                     int32_t hi) {{
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
    const __m256i ls = _mm256_max_epi32(s, zero);
    const __m256i e = _mm256_max_epi32(_mm256_sub_epi32(zero, s), zero);
    const __m256i xl = _mm256_sllv_epi32(x, ls);
    const __m256i rnd = _mm256_set1_epi64x((long long)1 << 30);
    const __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(xl, m), rnd);
    const __m256i po = _mm256_add_epi64(
        _mm256_mul_epi32(_mm256_srli_epi64(xl, 32), _mm256_srli_epi64(m, 32)), rnd);
    const __m256i h = _mm256_blend_epi32(_mm256_srli_epi64(pe, 31), _mm256_slli_epi64(po, 1),
                                         0xAA);
    const __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, e), one);
    const __m256i rem = _mm256_and_si256(h, mask);
    const __m256i thr = _mm256_sub_epi32(_mm256_srai_epi32(mask, 1), _mm256_srai_epi32(h, 31));
    __m256i r = _mm256_sub_epi32(_mm256_srav_epi32(h, e), _mm256_cmpgt_epi32(rem, thr));
    r = _mm256_add_epi32(r, _mm256_set1_epi32(zy));
    return _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}}
/* opfuse_x86_rq16r in ymm (the same integers, the same proof): |x| < 2^30, one multiplier
   broadcast in m, a right shift e >= 1 and no left shift, which the generator checks */
static inline __m256i opfuse_x86_rq8r(__m256i x, __m256i m, int e, int32_t zy, int32_t lo,
                                      int32_t hi) {{
    const __m256i rnd = _mm256_set1_epi64x((long long)1 << 30);
    const __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(x, m), rnd);
    const __m256i po = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(x, 32), m), rnd);
    const __m256i h = _mm256_blend_epi32(_mm256_srli_epi64(pe, 31), _mm256_slli_epi64(po, 1),
                                         0xAA);
    const __m256i t = _mm256_add_epi32(_mm256_srai_epi32(h, 31), _mm256_set1_epi32(1 << (e - 1)));
    __m256i r = _mm256_sra_epi32(_mm256_add_epi32(h, t), _mm_cvtsi32_si128(e));
    r = _mm256_add_epi32(r, _mm256_set1_epi32(zy));
    return _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}}
#endif
#if {NO} && defined(__AVX512F__)
static inline __m512 opfuse_x86_fma16(__m512 acc, __m512 s, __m512 v) {{
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vfmadd231ps {{%2, %1, %0|%0, %1, %2}}" : "+v"(acc) : "v"(s), "v"(v));
    return acc;
#else
    return _mm512_fmadd_ps(s, v, acc);
#endif
}}
#endif
#if {NO} && defined(__AVX512BW__)
static inline __m512i opfuse_x86_dot16(__m512i acc, __m512i x, __m512i w) {{
#if defined(__AVX512VNNI__) && defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd {{%2, %1, %0|%0, %1, %2}}" : "+v"(acc) : "v"(x), "vm"(w));
    return acc;
#elif defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(acc, x, w);
#else
    const __m512i lo = _mm512_set1_epi16(0x00ff);
    const __m512i xe = _mm512_and_si512(x, lo), xo = _mm512_srli_epi16(x, 8);
    const __m512i we = _mm512_srai_epi16(_mm512_slli_epi16(w, 8), 8);
    const __m512i wo = _mm512_srai_epi16(w, 8);
    return _mm512_add_epi32(acc, _mm512_add_epi32(_mm512_madd_epi16(xe, we),
                                                  _mm512_madd_epi16(xo, wo)));
#endif
}}
#endif
#if {Z512}
/* bits [max(0, -start), min(n, limit - start)) of n: the bytes of a window at index start that
   lie in [0, limit) */
static inline uint64_t opfuse_x86_span(int start, int limit, int n) {{
    const int lo = start < 0 ? -start : 0;
    const int hi = limit - start < n ? limit - start : n;
    if (hi <= lo) return 0;
    const uint64_t m = hi >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << hi) - 1);
    return m & ~(((uint64_t)1 << lo) - 1);
}}
/* lane l (of 16) <- bytes s*l .. s*l + 3 of a window (s = 1, 2): vpermb by the byte indices,
   or without VBMI vpermd (128-bit lane L <- dwords s*L .. s*L + 3) then vpshufb (byte 4i + k of
   a lane <- byte s*i + k: the same 16 numbers) */
#define OPFUSE_X86_UNUSED __attribute__((unused))
static const uint8_t opfuse_x86_vbmi1[64] OPFUSE_X86_UNUSED = {{0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6, 4, 5, 6, 7, 5, 6, 7, 8, 6, 7, 8, 9, 7, 8, 9, 10, 8, 9, 10, 11, 9, 10, 11, 12, 10, 11, 12, 13, 11, 12, 13, 14, 12, 13, 14, 15, 13, 14, 15, 16, 14, 15, 16, 17, 15, 16, 17, 18}};
static const uint8_t opfuse_x86_vbmi2[64] OPFUSE_X86_UNUSED = {{0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9, 8, 9, 10, 11, 10, 11, 12, 13, 12, 13, 14, 15, 14, 15, 16, 17, 16, 17, 18, 19, 18, 19, 20, 21, 20, 21, 22, 23, 22, 23, 24, 25, 24, 25, 26, 27, 26, 27, 28, 29, 28, 29, 30, 31, 30, 31, 32, 33}};
static const int32_t opfuse_x86_perm1[16] OPFUSE_X86_UNUSED = {{0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6}};
static const int32_t opfuse_x86_perm2[16] OPFUSE_X86_UNUSED = {{0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9}};
static const uint8_t opfuse_x86_shuf1[64] OPFUSE_X86_UNUSED = {{0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6, 0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6, 0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6, 0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6}};
static const uint8_t opfuse_x86_shuf2[64] OPFUSE_X86_UNUSED = {{0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9}};
static inline __m512i opfuse_x86_spread(__m512i u, __m512i a, __m512i b) {{
#if defined(__AVX512VBMI__)
    (void)b;
    return _mm512_permutexvar_epi8(a, u);
#else
    return _mm512_shuffle_epi8(_mm512_permutexvar_epi32(a, u), b);
#endif
}}
#endif
#if {NO} && defined(__AVX512BW__)
static inline __m512i opfuse_x86_rq16(__m512i x, __m512i m, __m512i s, int32_t zy, int32_t lo,
                                      int32_t hi) {{
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
    const __m512i ls = _mm512_max_epi32(s, zero);
    const __m512i e = _mm512_max_epi32(_mm512_sub_epi32(zero, s), zero);
    const __m512i xl = _mm512_sllv_epi32(x, ls);
    const __m512i rnd = _mm512_set1_epi64((long long)1 << 30);
    const __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(xl, m), rnd);
    const __m512i po = _mm512_add_epi64(
        _mm512_mul_epi32(_mm512_srli_epi64(xl, 32), _mm512_srli_epi64(m, 32)), rnd);
    const __m512i h = _mm512_mask_blend_epi32((__mmask16)0xAAAA, _mm512_srli_epi64(pe, 31),
                                              _mm512_slli_epi64(po, 1));
    const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, e), one);
    const __m512i rem = _mm512_and_si512(h, mask);
    const __m512i thr = _mm512_sub_epi32(_mm512_srai_epi32(mask, 1), _mm512_srai_epi32(h, 31));
    __m512i r = _mm512_srav_epi32(h, e);
    r = _mm512_mask_add_epi32(r, _mm512_cmpgt_epi32_mask(rem, thr), r, one);
    r = _mm512_add_epi32(r, _mm512_set1_epi32(zy));
    return _mm512_min_epi32(_mm512_max_epi32(r, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi));
}}
/* opfuse_x86_rq16 with one multiplier (broadcast in m) and its shift split into the left shift
   ls and the right shift e (>= 0): the shifts by a count register, the rounding mask a scalar */
static inline __m512i opfuse_x86_rq16s(__m512i x, __m512i m, int ls, int e, int32_t zy,
                                       int32_t lo, int32_t hi) {{
    const __m512i xl = _mm512_sll_epi32(x, _mm_cvtsi32_si128(ls));
    const __m512i rnd = _mm512_set1_epi64((long long)1 << 30);
    const __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(xl, m), rnd);
    const __m512i po = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(xl, 32), m), rnd);
    const __m512i h = _mm512_mask_blend_epi32((__mmask16)0xAAAA, _mm512_srli_epi64(pe, 31),
                                              _mm512_slli_epi64(po, 1));
    const int32_t mask = (int32_t)((1u << e) - 1u);
    const __m512i rem = _mm512_and_si512(h, _mm512_set1_epi32(mask));
    const __m512i thr = _mm512_sub_epi32(_mm512_set1_epi32(mask >> 1), _mm512_srai_epi32(h, 31));
    __m512i r = _mm512_sra_epi32(h, _mm_cvtsi32_si128(e));
    r = _mm512_mask_add_epi32(r, _mm512_cmpgt_epi32_mask(rem, thr), r, _mm512_set1_epi32(1));
    r = _mm512_add_epi32(r, _mm512_set1_epi32(zy));
    return _mm512_min_epi32(_mm512_max_epi32(r, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi));
}}
/* opfuse_x86_rq16s for |x| < 2^30 with a right shift e >= 1 and no left shift (the generator
   checks both from the weights): the doubling high product |h| <= |x| cannot wrap in
   h + 2^(e-1), so the rounding divide is (h + 2^(e-1) - (h < 0)) >> e */
static inline __m512i opfuse_x86_rq16r(__m512i x, __m512i m, int e, int32_t zy, int32_t lo,
                                       int32_t hi) {{
    const __m512i rnd = _mm512_set1_epi64((long long)1 << 30);
    const __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(x, m), rnd);
    const __m512i po = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), m), rnd);
    const __m512i h = _mm512_mask_blend_epi32((__mmask16)0xAAAA, _mm512_srli_epi64(pe, 31),
                                              _mm512_slli_epi64(po, 1));
    const __m512i t = _mm512_add_epi32(_mm512_srai_epi32(h, 31), _mm512_set1_epi32(1 << (e - 1)));
    __m512i r = _mm512_sra_epi32(_mm512_add_epi32(h, t), _mm_cvtsi32_si128(e));
    r = _mm512_add_epi32(r, _mm512_set1_epi32(zy));
    return _mm512_min_epi32(_mm512_max_epi32(r, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi));
}}
#endif

"""


def prelude(funcs: str) -> str:
    """The helpers, if any kernel of ``funcs`` (model.c's kernel text) uses them or names an
    AVX type (x86/transpose.py: the intrinsics header is here); else ""."""
    return PRELUDE if MARK in funcs or "__m512" in funcs or "__m256" in funcs else ""
