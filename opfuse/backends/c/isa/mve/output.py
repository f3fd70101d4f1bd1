"""The matrix family's output stage on Helium (isa/mve/__init__.py): the int32 sums of four
output pixels of one channel at a time in a vector, requantized, offset, clamped and stored as four
contiguous int8 (``vstrbq_s32``; a partial vector under ``vctp32q``).

Exact as the scalar C's ``opfuse_requant_r`` (requant.py; ``Requant.fast``: every shift a right
shift, the accumulator below 2^30) and ``opfuse_requant`` (``requant``): ``vqrdmulhq_n_s32`` is floor((2 x m + 2^31) / 2^32),
TFLite's SaturatingRoundingDoublingHighMul (its nudge and truncation give that floor; a
multiplier below 2^31 never saturates); RoundingDivideByPOT by e = -s >= 1 (ties away from zero)
is ``vrshlq_n_s32`` (ties up) of h - (h < 0), the fix-up CMSIS-NN's MVE requantization also makes.
The scalar C stays in the ``#else``."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.mve.eltwise import rescale

LANES = 4


def requant(w: CWriter, v: str, fast: bool) -> None:
    """``v`` (int32x4_t) requantized by the channel's ``qm``, ``qs``: TFLite's
    MultiplyByQuantizedMultiplier. ``fast`` (every shift a right shift, |v| < 2^30): the three
    steps above; else the left shift first (``vshlq_r_s32`` wraps, as TFLite's shift through
    uint32) and the fix-up only where there is a right shift, saturating (h = INT32_MIN stays,
    whose RoundingDivideByPOT is that of INT32_MIN - 1 under the rounding shift)."""
    if fast:
        w(f"{v} = vqrdmulhq_n_s32({v}, qm);")
        w(f"{v} = vrshlq_n_s32(vaddq_s32({v}, vshrq_n_s32({v}, 31)), qs);")
        return
    w("const int32_t qls = qs > 0 ? qs : 0, qrs = qs > 0 ? 0 : qs;  /* qrs <= 0: right */")
    w(f"{v} = vqrdmulhq_n_s32(vshlq_r_s32({v}, qls), qm);")
    w(f"{v} = vqaddq_s32({v}, vandq_s32(vshrq_n_s32({v}, 31), vdupq_n_s32(qrs ? -1 : 0)));")
    w(f"{v} = vrshlq_n_s32({v}, qrs);")


def requant_onnx(w: CWriter, v: str, ranged: bool) -> None:
    """``v`` (int32x4_t) requantized by ONNX's rounding with the channel's scale ``qf``: as the
    scalar ``opfuse_requant_f`` (requant.py), converted to float, multiplied in float32 (both
    rounded half to even, as the scalar FPU's), converted back rounding half to even
    (``vcvtnq``, which saturates as VCVTR does); ``ranged`` (``Requant.ranged``): no clamp to
    +-2^30, which could not act. MVE-F only (``OPFUSE_MVEF``)."""
    w(f"{v} = vcvtnq_s32_f32(vmulq_n_f32(vcvtq_f32_s32({v}), qf));")
    if not ranged:
        w(f"{v} = vminq_s32(vmaxq_s32({v}, vdupq_n_s32(-1073741824)), vdupq_n_s32(1073741824));")


def store_tile(w: CWriter, *, sums: list[str], bias: str, m: str, s: str, zy: int, lo: int,
               hi: int, dst: str, count: str | None, scalar: Callable[[], None],
               fast: bool = True, add: object = None, scale: str | None = None,
               ranged: bool = False) -> None:
    """``dst[q]`` = the int8 of ``sums[q] + bias`` for ``q`` < ``count`` (None: all of them);
    ``scalar()`` writes the same stores in plain C for the ``#else``; ``add``: a residual Add
    after it (int8/residual.py ``ResidualAdd``), as isa/mve/eltwise.py's; ``scale``: ONNX's
    rounding by this float (``requant_onnx``; ``m``, ``s`` unused), under MVE-F."""
    w("#ifdef OPFUSE_MVE" if scale is None else "#ifdef OPFUSE_MVEF")
    w.open("")
    w(f"const int32_t qm = {m}, qs = {s};" if scale is None else f"const float qf = {scale};")
    for c0 in range(0, len(sums), LANES):
        part = sums[c0:c0 + LANES]
        lanes = ", ".join(part + ["0"] * (LANES - len(part)))
        w.open("")
        w(f"int32x4_t v = {{{lanes}}};")
        w(f"v = vaddq_n_s32(v, {bias});")
        if scale is None:
            requant(w, "v", fast)
        else:
            requant_onnx(w, "v", ranged)
        w(f"v = vminq_s32(vmaxq_s32(vaddq_n_s32(v, {zy}), vdupq_n_s32({lo})), "
          f"vdupq_n_s32({hi}));")
        n = None if count is None and len(part) == LANES else (
            str(len(part)) if count is None else
            (f"({count})" if c0 == 0 else f"(({count}) > {c0} ? ({count}) - {c0} : 0)"))
        pred = None if n is None else f"vctp32q((uint32_t){n})"
        if add is not None:
            residual(w, add, c0, pred)
        if n is None:
            w(f"vstrbq_s32({dst} + {c0}, v);")
        else:
            w(f"vstrbq_p_s32({dst} + {c0}, v, {pred});")
        w.close()
    w.close()
    w("#else")
    scalar()
    w("#endif")


def residual(w: CWriter, add, c0: int, pred: str | None) -> None:  # noqa: ANN001
    """``v`` (the conv's int8 values) through the residual Add ``add``: both inputs offset,
    shifted by the headroom and rescaled, summed, rescaled to the output, offset and clamped."""
    p = add.p
    load = (f"vldrbq_s32({add.other} + {c0})" if pred is None
            else f"vldrbq_z_s32({add.other} + {c0}, {pred})")
    conv, other = ("a", "b") if add.first else ("b", "a")
    w(f"int32x4_t {conv} = vshlq_n_s32(vsubq_n_s32(v, {add.z_conv}), {p['left_shift']});")
    w(f"int32x4_t {other} = vshlq_n_s32(vsubq_n_s32({load}, {add.z_other}), "
      f"{p['left_shift']});")
    rescale(w, "a", p["m1"], p["s1"])
    rescale(w, "b", p["m2"], p["s2"])
    w(f"v = {'vsubq_s32' if add.sub else 'vaddq_s32'}(a, b);")
    rescale(w, "v", p["mo"], p["so"])
    w(f"v = vminq_s32(vmaxq_s32(vaddq_n_s32(v, {add.zo}), vdupq_n_s32({add.lo})), "
      f"vdupq_n_s32({add.hi}));")
