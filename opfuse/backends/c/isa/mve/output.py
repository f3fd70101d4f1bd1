"""The matrix family's output stage on Helium (isa/mve/__init__.py): the int32 sums of four
output pixels of one channel at a time in a vector, requantized, offset, clamped and stored as four
contiguous int8 (``vstrbq_s32``; a partial vector under ``vctp32q``).

Exact where the scalar C's ``opfuse_requant_r`` is (requant.py: every shift a right shift and the
accumulator below 2^30, ``Requant.fast``): ``vqrdmulhq_n_s32`` is floor((2 x m + 2^31) / 2^32),
TFLite's SaturatingRoundingDoublingHighMul (its nudge and truncation give that floor; a
multiplier below 2^31 never saturates); RoundingDivideByPOT by e = -s >= 1 (ties away from zero)
is ``vrshlq_n_s32`` (ties up) of h - (h < 0), the fix-up CMSIS-NN's MVE requantization also makes.
The scalar C stays in the ``#else``."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter

LANES = 4


def store_tile(w: CWriter, *, sums: list[str], bias: str, m: str, s: str, zy: int, lo: int,
               hi: int, dst: str, count: str | None, scalar: Callable[[], None]) -> None:
    """``dst[q]`` = the int8 of ``sums[q] + bias`` for ``q`` < ``count`` (None: all of them);
    ``scalar()`` writes the same stores in plain C for the ``#else``."""
    w("#ifdef OPFUSE_MVE")
    w.open("")
    w(f"const int32_t qm = {m}, qs = {s};")
    for c0 in range(0, len(sums), LANES):
        part = sums[c0:c0 + LANES]
        lanes = ", ".join(part + ["0"] * (LANES - len(part)))
        w.open("")
        w(f"int32x4_t v = {{{lanes}}};")
        w(f"v = vqrdmulhq_n_s32(vaddq_n_s32(v, {bias}), qm);")
        w("v = vrshlq_n_s32(vaddq_s32(v, vshrq_n_s32(v, 31)), qs);")
        w(f"v = vminq_s32(vmaxq_s32(vaddq_n_s32(v, {zy}), vdupq_n_s32({lo})), "
          f"vdupq_n_s32({hi}));")
        n = None if count is None and len(part) == LANES else (
            str(len(part)) if count is None else
            (f"({count})" if c0 == 0 else f"(({count}) > {c0} ? ({count}) - {c0} : 0)"))
        if n is None:
            w(f"vstrbq_s32({dst} + {c0}, v);")
        else:
            w(f"vstrbq_p_s32({dst} + {c0}, v, vctp32q((uint32_t){n}));")
        w.close()
    w.close()
    w("#else")
    scalar()
    w("#endif")
