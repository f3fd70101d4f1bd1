"""The im2col fill's channel runs on Helium (isa/mve/__init__.py; the fill is int8/im2col.py):
eight input channels of one pixel, ``ch`` bytes apart, gathered into int16 lanes by one
``vldrbq_gather_offset_s16`` (``_u16`` for uint8: zero-extended, as the scalar C's entries) and
written as the column's two quads, ``stride`` quads apart, by one ``vstrdq_scatter_offset_s64``.
A run of 4 (mod 8) ends with the scalar C's quad."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter

MAX_OFFSET = 65535  # the gather's offsets are uint16


def fill_gather(w: CWriter, *, src: str, xct: str, ch: object, count: int, dst: str,
                stride: int, quad: Callable[[str], None], ch_max: int | None = None) -> bool:
    """Channels ``0 .. count`` (a multiple of 4) of ``src`` into ``dst``, one quad per 4, ``dst``
    stepped by ``stride`` per quad (as the scalar loop leaves it); ``quad(ic)`` writes the quad
    of channels ``ic .. ic + 3`` (a C expression) at ``dst`` in plain C, the plain loop in the
    ``#else``. False, writing nothing, where the gather does not apply: fewer than 8 channels,
    or channels too far apart for its offsets (``ch`` a C expression, a shared cascade member's
    ring: its largest value ``ch_max``; None: not known, no gather)."""
    bound = ch if isinstance(ch, int) else ch_max  # ch a C expression: a cascade's ring
    if bound is None or 7 * bound > MAX_OFFSET or count < 8 or xct not in (
            "int8_t", "uint8_t"):
        return False
    sign = "s16" if xct == "int8_t" else "u16"
    w("#ifdef OPFUSE_MVE")
    w.open("")
    step = f"{ch}u" if isinstance(ch, int) else f"(uint16_t)({ch})"
    w(f"const uint16x8_t go = vmulq_n_u16(vidupq_n_u16(0u, 1), {step});")
    w(f"const uint64x2_t so = vreinterpretq_u64_u32(vsetq_lane_u32({stride * 8}u, "
      "vdupq_n_u32(0u), 2));")
    if count >= 8:  # always, see above
        w.open(f"for (int ic = 0; ic + 8 <= {count}; ic += 8, {dst} += {2 * stride})")
        load = f"vldrbq_gather_offset_{sign}({src} + ic*{ch}, go)"
        w(f"const int16x8_t v = {load if sign == 's16' else f'vreinterpretq_s16_u16({load})'};")
        w(f"vstrdq_scatter_offset_s64({dst}, so, vreinterpretq_s64_s16(v));")
        w.close()
    if count % 8:
        w.open("")
        quad(str(count - 4))
        w(f"{dst} += {stride};")
        w.close()
    w.close()
    w("#else")
    w.open(f"for (int ic = 0; ic < {count}; ic += 4, {dst} += {stride})")
    quad("ic")
    w.close()
    w("#endif")
    return True
