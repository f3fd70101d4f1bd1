"""int8 Add / Sub on Helium (isa/mve/__init__.py; the kernel is int8/chain.py's
``emit_elementwise8``): four elements a vector, TFLite's integers. Each input is widened
(``vldrbq_z_s32``), offset by its zero point and shifted left by the headroom (20 bits), rescaled
to twice the larger scale, summed, rescaled to the output and offset, clamped (a chain of clamps
folded in) and stored (``vstrbq_p_s32``); the last vector is predicated (``vctp32q``). Each
rescaling is MultiplyByQuantizedMultiplier with a right shift (add_params: every shift <= 0), as
isa/mve/output.py: ``vqrdmulhq_n_s32``, then for a shift the saturating h - (h < 0) fix-up and
``vrshlq_n_s32``."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter

LANES = 4


def rescale(w: CWriter, v: str, m: int, s: int) -> None:
    w(f"{v} = vqrdmulhq_n_s32({v}, {m});")
    if s < 0:
        w(f"{v} = vrshlq_n_s32(vqaddq_s32({v}, vshrq_n_s32({v}, 31)), {s});")


def elementwise_add(w: CWriter, *, n: int, x: str, y: str, out: str, zx: int, zy: int,
                    p: dict, sub: bool, zo: int, lo: int, hi: int,
                    scalar: Callable[[], None]) -> None:
    """``out[i]`` = the int8 of ``x[i] +/- y[i]`` for ``i < n`` (``p``: quant.add_params)."""
    w("#ifdef OPFUSE_MVE")
    w.open(f"for (int i = 0; i < {n}; i += {LANES})")
    w(f"const mve_pred16_t p = vctp32q((uint32_t)({n} - i));")
    for v, src, z, m, s in (("a", x, zx, p["m1"], p["s1"]), ("b", y, zy, p["m2"], p["s2"])):
        w(f"int32x4_t {v} = vshlq_n_s32(vsubq_n_s32(vldrbq_z_s32({src} + i, p), {z}), "
          f"{p['left_shift']});")
        rescale(w, v, m, s)
    w(f"int32x4_t r = {'vsubq_s32' if sub else 'vaddq_s32'}(a, b);")
    rescale(w, "r", p["mo"], p["so"])
    w(f"r = vminq_s32(vmaxq_s32(vaddq_n_s32(r, {zo}), vdupq_n_s32({lo})), vdupq_n_s32({hi}));")
    w(f"vstrbq_p_s32({out} + i, r, p);")
    w.close()
    w("#else")
    scalar()
    w("#endif")
