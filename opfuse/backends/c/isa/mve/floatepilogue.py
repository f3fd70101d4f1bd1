"""What the MVE-F float kernels (floatconv.py, floatdw.py, floatdirect.py) share: the vector's
lanes, the pointwise tile's channels, and the clamps-only epilogue (Relu, Clip with constant
bounds) as compares and selects that let NaN pass, as the scalar chain does, and what a row kernel
declares before its loops (``open_images``)."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter

LANES = 4  # float32 lanes of a 128-bit vector
OCT = 4  # output channels of a pointwise tile


def apply_clamps(w: CWriter, v: str, steps: list[tuple[str | None, str | None]]) -> None:
    """``v = clamp(v)`` per step, as the scalar chain's selects (NaN stays)."""
    for lo, hi in steps:
        if lo is not None:
            w(f'OPFUSE_CLAMPF({v}, "lt", {lo});')
        if hi is not None:
            w(f'OPFUSE_CLAMPF({v}, "gt", {hi});')


def open_images(w: CWriter, g, rows: tuple[str, str] | None) -> str:  # noqa: ANN001
    """What a float row kernel declares first: the zero row read above or below the input, the
    gather offsets of a strided row, and the loop over the images where it computes whole
    tensors (``rows`` None); the C name of the image index."""
    w(f"static const float zr[{g.iw}] = {{0.0f}};  /* a row above or below the input */")
    if g.s[1] > 1:
        w(f"const uint32x4_t go = vmulq_n_u32(vidupq_n_u32(0u, 1), {g.s[1]}u);")
    if rows is not None:
        return "0"
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    return "n"
