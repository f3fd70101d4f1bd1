"""The line buffer of a row conv (pixeltiles.py, cascade_rows.py): an input row copied into one
contiguous run per column phase, zero-padded, so a tile reads each tap at a constant offset with
no bounds test (kernelplan/convf.py: ``line_width``, ``line_floats``)."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter


def phase_copy(w: CWriter, q: str, xr: str, s: int, lw: int, pl: int, w_in: int,
               pixel: int = 1) -> None:
    """``q[f*lw + j] = xr[(j*s + f - pl)*pixel]`` inside the row, 0 outside, for each phase f < s
    (``pixel``: the elements between a row's columns, the channels of an NHWC row)."""
    for f in range(s):
        lo = next((j for j in range(lw) if j * s + f - pl >= 0), lw)
        hi = next((j for j in range(lw) if j * s + f - pl >= w_in), lw)
        hi = max(hi, lo)
        base = f"{q} + {f * lw}" if f else q
        parts = []
        if lo > 0:
            parts.append(f"for (int j = 0; j < {lo}; ++j) p[j] = 0.0f;")
        if hi > lo:
            src = f"{xr}[j*{s} + {f - pl}]" if s > 1 else f"{xr}[j + {f - pl}]"
            if pixel != 1:
                src = f"{xr}[(j*{s} + {f - pl})*{pixel}]"
            parts.append(f"for (int j = {lo}; j < {hi}; ++j) p[j] = {src};")
        if hi < lw:
            parts.append(f"for (int j = {hi}; j < {lw}; ++j) p[j] = 0.0f;")
        w(f"{{ float *p = {base}; " + " ".join(parts) + " }")
