"""The line buffer of a row conv (pixeltiles.py, convrows.py, int8/row_tiles.py): an input row
copied into one contiguous run per column phase, padded, so a tile reads each tap at a constant
offset with no bounds test (kernelplan/convf.py: ``line_width``, ``line_floats``). Float pads
with 0.0f; int8 with the input's zero point (``ctype``, ``pad``), TFLite's padding value, whose
products the int8 conv has folded out of its bias."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter

GATHER_CHANNELS = 4  # NHWC rows of at most this many channels: gathered pixel by pixel


def tap_offsets(kh: int, kw: int, sw: int, dw: int, lw: int) -> tuple[int, ...]:
    """Each tap's offset from column ``i0`` in the line buffer ``fill_rows`` writes: kernel row
    ``ky``'s ``sw`` phases of ``lw`` columns, tap ``kx`` in phase ``(kx*dw) % sw``."""
    return tuple(ky * sw * lw + ((kx * dw) % sw) * lw + (kx * dw) // sw
                 for ky in range(kh) for kx in range(kw))


def phase_copy(w: CWriter, q: str, xr: str, s: int, lw: int, pl: int, w_in: int,
               pixel: int = 1, ctype: str = "float", pad: str = "0.0f",
               shift: str | None = None) -> None:
    """``q[f*lw + j] = xr[(j*s + f - pl)*pixel]`` inside the row, ``pad`` outside, for each phase
    f < s (``pixel``: the elements between a row's columns, the channels of an NHWC row);
    ``shift``: a C expression of columns added to every input column (a band of the row, its
    bounds then found at run time)."""
    if shift is not None:
        _shifted_copy(w, q, xr, s, lw, pl, w_in, pixel, ctype, pad, shift)
        return
    for f in range(s):
        lo = next((j for j in range(lw) if j * s + f - pl >= 0), lw)
        hi = next((j for j in range(lw) if j * s + f - pl >= w_in), lw)
        hi = max(hi, lo)
        base = f"{q} + {f * lw}" if f else q
        parts = []
        if lo > 0:
            parts.append(f"for (int j = 0; j < {lo}; ++j) p[j] = {pad};")
        if hi > lo:
            src = f"{xr}[j*{s} + {f - pl}]" if s > 1 else f"{xr}[j + {f - pl}]"
            if pixel != 1:
                src = f"{xr}[(j*{s} + {f - pl})*{pixel}]"
            parts.append(f"for (int j = {lo}; j < {hi}; ++j) p[j] = {src};")
        if hi < lw:
            parts.append(f"for (int j = {hi}; j < {lw}; ++j) p[j] = {pad};")
        w(f"{{ {ctype} *p = {base}; " + " ".join(parts) + " }")


def _shifted_copy(w: CWriter, q: str, xr: str, s: int, lw: int, pl: int, w_in: int, pixel: int,
                  ctype: str, pad: str, shift: str) -> None:
    """``phase_copy`` from input column ``x0 = shift + f - pl`` on: the columns ``lo .. hi``
    inside the row found at run time."""
    at = f"x0 + j*{s}" if s > 1 else "x0 + j"
    src = f"{xr}[{at}]" if pixel == 1 else f"{xr}[({at})*{pixel}]"
    for f in range(s):
        w.open("")
        w(f"{ctype} *p = {q} + {f * lw};" if f else f"{ctype} *p = {q};")
        w(f"const int x0 = {shift} + {f - pl};")
        w(f"int lo = x0 >= 0 ? 0 : (-x0 + {s - 1}) / {s}, "
          f"hi = x0 >= {w_in} ? 0 : ({w_in} - x0 + {s - 1}) / {s};")
        w(f"if (lo > {lw}) lo = {lw};")
        w(f"if (hi > {lw}) hi = {lw};")
        w("if (hi < lo) hi = lo;")
        w(f"for (int j = 0; j < lo; ++j) p[j] = {pad};")
        w(f"for (int j = lo; j < hi; ++j) p[j] = {src};")
        w(f"for (int j = hi; j < {lw}; ++j) p[j] = {pad};")
        w.close()


def fill_rows(w: CWriter, *, channels: int, kh: int, per_ci: int, sw: int, lw: int, pl: int,
              w_in: int, h_in: int, first_row: Callable[[int], str], slot: Callable[[str], str],
              row: Callable[[int], str], pixel: int = 1, ctype: str = "float",
              pad: str = "0.0f", shift: str | None = None, gather: bool = False) -> None:
    """The line buffer of output row ``r``, its kernel rows unrolled: ``first_row(ky)`` the input
    row kernel row ``ky`` reads, ``slot(iy)`` that row's offset where it is inside the input,
    ``row(ky)`` the pointer to channel ``ci``'s row ``ky`` (from ``sl<ky>``); rows outside the
    input are ``pad`` (``ctype``: the elements' C type); ``shift``: as ``phase_copy``'s (a band
    of the row's columns); ``gather``: NHWC rows of at most ``GATHER_CHANNELS`` channels read
    pixel by pixel (``_gather_pixels``; int8/row_tiles.py), else channel by channel."""
    w(f"{ctype} line[{channels * per_ci}];")
    for ky in range(kh):
        w(f"const int iy{ky} = {first_row(ky)};")
        w(f"const int in{ky} = iy{ky} >= 0 && iy{ky} < {h_in};")
        w(f"const int sl{ky} = in{ky} ? {slot(f'iy{ky}')} : 0;")
    if gather and pixel > 1 and shift is None and channels == pixel <= GATHER_CHANNELS:
        _gather_pixels(w, channels, kh, per_ci, sw, lw, pl, w_in, row, ctype, pad)
        return
    w.open(f"for (int ci = 0; ci < {channels}; ++ci)")
    for ky in range(kh):
        w.open(f"if (in{ky})")
        w(f"const {ctype} *xr = {row(ky)};")
        phase_copy(w, f"(line + ci*{per_ci} + {ky * sw * lw})", "xr", sw, lw, pl, w_in, pixel,
                   ctype, pad, shift)
        w.close()
        w(f"else for (int j = 0; j < {sw * lw}; ++j) "
          f"line[ci*{per_ci} + {ky * sw * lw} + j] = {pad};")  # fmt: skip
    w.close()


def _gather_pixels(w: CWriter, channels: int, kh: int, per_ci: int, sw: int, lw: int, pl: int,
                   w_in: int, row: Callable[[int], str], ctype: str, pad: str) -> None:
    """``fill_rows`` from NHWC rows of ``channels`` (at most ``GATHER_CHANNELS``) elements a
    pixel: each phase's pixels read once, a pixel's channels written to each channel's run, a
    loop gcc vectorizes as loads and shuffles (rather than each channel's strided copy)."""
    for ky in range(kh):
        w.open(f"if (in{ky})")
        w(f"const {ctype} *xr; {{ const int ci = 0; xr = {row(ky)}; }}")
        for f in range(sw):
            lo = next((j for j in range(lw) if j * sw + f - pl >= 0), lw)
            hi = max(lo, next((j for j in range(lw) if j * sw + f - pl >= w_in), lw))
            at = ky * sw * lw + f * lw
            w.open("")
            w(" ".join(f"{ctype} *d{c} = line + {c * per_ci + at};" for c in range(channels)))
            for a, b in ((0, lo), (hi, lw)):
                if b > a:
                    w(f"for (int j = {a}; j < {b}; ++j) {{ "
                      + " ".join(f"d{c}[j] = {pad};" for c in range(channels)) + " }")
            if hi > lo:
                w.open(f"for (int j = {lo}; j < {hi}; ++j)")
                w(f"const {ctype} *px = xr + (j*{sw} + {f - pl})*{channels};")
                w(" ".join(f"d{c}[j] = px[{c}];" for c in range(channels)))
                w.close()
            w.close()
        w.close()
        w.open("else")
        w(f"for (int j = 0; j < {sw * lw}; ++j) {{ "
          + " ".join(f"line[{c * per_ci + ky * sw * lw} + j] = {pad};" for c in range(channels))
          + " }")
        w.close()
