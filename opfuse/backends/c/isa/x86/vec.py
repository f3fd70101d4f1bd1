"""The spelling of one integer vector width for the residual Add's writers (x86/residual.py,
x86/residual_fast.py), which write their arithmetic once for both: zmm (AVX-512, 16 int32
lanes) and ymm (AVX2, 8). Most intrinsics differ only in their prefix; the few that do not
(the 64-bit broadcast, the blend of even and odd dwords, the requantization helper of
x86/helpers.py) are named here. AVX2 has no 64-bit arithmetic shift: ``odd_high`` writes the
high dwords of 64-bit lanes shifted by 32 or more without one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Vec:
    t: str  # the C type
    p: str  # the intrinsics' prefix
    set64: str  # a 64-bit broadcast
    rq: str  # x86/helpers.py's requantization of a vector (per-lane multipliers and shifts)
    lanes: int

    def blend(self, even: str, odd: str) -> str:
        """The even dwords of ``even``, the odd of ``odd``."""
        if self.lanes == 16:
            return f"_mm512_mask_blend_epi32((__mmask16)0xAAAA, {even}, {odd})"
        return f"_mm256_blend_epi32({even}, {odd}, 0xAA)"

    def high(self, even: str, odd: str, n: int) -> str:
        """Dword 2i: the low dword of ``even``'s 64-bit lane i shifted right by ``n``
        (arithmetic, 32 <= ``n`` < 64); dword 2i + 1: that of ``odd``'s. zmm: ``vpsraq``;
        ymm: the high dword shifted by ``n - 32`` (bits ``n`` .. 63 of the 64-bit value, its
        sign above: the same dword), the even lanes' moved down."""
        if self.lanes == 16:
            return self.blend(f"_mm512_srai_epi64({even}, {n})",
                              f"_mm512_srai_epi64({odd}, {n - 32})")
        return self.blend(f"_mm256_srli_epi64(_mm256_srai_epi32({even}, {n - 32}), 32)",
                          f"_mm256_srai_epi32({odd}, {n - 32})")


ZMM = Vec("__m512i", "_mm512_", "_mm512_set1_epi64", "opfuse_x86_rq16", 16)
YMM = Vec("__m256i", "_mm256_", "_mm256_set1_epi64x", "opfuse_x86_rq8", 8)
