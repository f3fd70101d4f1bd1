"""The residual Add/Sub epilogue (x86/residual.py) on the ymm branches (AVX2, ymm VNNI) of
x86/core.py: in x86/conv.py's ``emit_store_t4``, which packs each 4 pixels x 8 channels of the
register block (``tmp``, the conv's requantized int32 values) into bytes, the 4 pixel vectors are
first made the Add's final values. The other operand (NCHW, the output's shape) lies as 8
channel rows of the block's pixels, ``plane`` bytes apart: each channel's (up to) 4 bytes are one
dword lane of a ymm (a 4-byte load; ``memcpy`` of fewer at a row's last block, never past the
block), and pixel ``q`` is byte ``q`` of every lane, sign or zero extended by two shifts: the
transpose in 2 operations a pixel. Then x86/residual.py's ``add_values`` in ymm spelling
(x86/vec.py): TFLite's int8 ADD exactly, or x86/residual_fast.py's proved short form, the clamp
to [-128, 127] left to the store's saturating packs (int8 output only)."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.residual import Residual, add_values
from opfuse.backends.c.isa.x86.vec import YMM


def residual_t4(r: Residual, other: str, plane: int, ocg: int
                ) -> Callable[[CWriter, int, int], list[str]]:
    """``emit_store_t4``'s ``add``: inside its loop over 8 channels at ``o8`` (``n8`` of them
    real) and its block of pixels ``q0 .. q0 + n - 1`` (vectors ``r0 .. r3``), the Add's values
    of those pixels; returns the 4 vectors to pack. ``other``: the operand at the register
    block's first pixel of the group's channel 0."""
    shift = "_mm256_srai_epi32" if r.signed else "_mm256_srli_epi32"

    def add(w: CWriter, q0: int, n: int) -> list[str]:
        w(f"const uint8_t *ob_ = (const uint8_t *)({other}) + o8*{plane} + {q0};")
        for c in range(8):
            load = f"memcpy(&d{c}_, ob_ + {c * plane}, {n});"
            w(f"int32_t d{c}_ = 0;")
            w(load if ocg % 8 == 0 else f"if ({c} < n8) {load}")
        # unpacks of dword loads: gcc built _mm256_setr_epi32 of them in 64-bit GPRs stored to
        # the stack, and the 32-byte reload waited for the stores (a store-forwarding stall)
        d = [f"_mm_cvtsi32_si128(d{c}_)" for c in range(8)]
        half = [f"_mm_unpacklo_epi64(_mm_unpacklo_epi32({d[h]}, {d[h + 1]}), "
                f"_mm_unpacklo_epi32({d[h + 2]}, {d[h + 3]}))" for h in (0, 4)]
        w(f"const __m256i d_ = _mm256_inserti128_si256(_mm256_castsi128_si256({half[0]}), "
          f"{half[1]}, 1);")
        out = []
        for q in range(4):
            if q >= n:  # past the plane's row: packed, never stored
                out.append(f"r{q}")
                continue
            w(f"__m256i o{q}_;")
            w.open("")
            u = "d_" if q == 3 else f"_mm256_slli_epi32(d_, {24 - 8 * q})"
            w(f"const __m256i u = {shift}({u}, 24);")
            add_values(w, r, f"r{q}", "u", f"o{q}_", vec=YMM, sat=True)
            w.close()
            out.append(f"o{q}_")
        return out

    return add
