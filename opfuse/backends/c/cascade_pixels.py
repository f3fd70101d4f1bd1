"""Pixel tiles of a cascaded float conv member for a scalar FPU (``IsaKernels.pixel_members``).

The column and channel tiles of ``cascade_rows.py`` keep their sums in arrays a vector unit holds
in registers; on a scalar FPU (Cortex-M4/M7/M33) every multiply-add of those tiles loads and
stores its sum. Here one output pixel's ``pixel_lanes`` channels are scalar sums, kept in registers
over every input channel and tap (the layer-by-layer stem's form, ``convpix._row``): per tap the
input is loaded once and each channel's weight once, and the epilogue stores each value once.
The weights are the column tile's packing (``[block][ICg][KH][KW][lanes]``), the input the same
row or line buffer (``cascade_rows._Tile.row``).
"""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter

PIXEL_OCB = (16, 8)  # output channels per pixel tile, the first that divides the conv's
# input channels x taps at most this many: the whole reduction unrolled; more, a loop over the input
# channels, each one's taps unrolled. mobilenet_v2_128_0.5 cascaded on cortex-m7 with 32: 116,708 B
# of code, 54,569,479 instructions; 8: 49,468 B, 54,254,005; 0: 44,372 B, 54,662,744
UNROLL_TAPS = 8


def pixel_lanes(ocg: int) -> int:
    """Sums per pixel tile for ``ocg`` output channels a group: 16 (and the tap's input: 17 of
    the FPU's 32 single registers) where 16 divide them, else 8 (no zero-padded channels)."""
    return next((n for n in PIXEL_OCB if ocg % n == 0), PIXEL_OCB[-1])


def pixel_tiles(w: CWriter, tl, epilogue: list[str], yp: str, ry: int) -> None:  # noqa: ANN001
    """Rows' worth of one output row ``ys``: for each block of ``tl.lanes`` channels, each column
    ``i`` of the row as that many scalar sums over the block's input channels and taps."""
    ocb, kk = tl.lanes, len(tl.taps)
    last = tl.ocg - (tl.blocks - 1) * ocb
    w.open(f"for (int grp = 0; grp < {tl.group}; ++grp) for (int ob = 0; ob < {tl.blocks}; ++ob)")
    w(f"const int blk = grp*{tl.blocks} + ob;")
    w(f"const float *wb = {tl.wp} + blk*{tl.icg * kk * ocb};")
    w.open(f"for (int i = 0; i < {tl.w_out}; ++i)")
    init = (lambda o: f"{tl.bp}[blk*{ocb} + {o}]") if tl.bp else (lambda o: "0.0f")
    w(" ".join(f"float a{o} = {init(o)};" for o in range(ocb)))

    def taps(j: str, wj: str) -> None:
        w(f"const int ci = grp*{tl.icg} + {j};")
        w(f"const float *xr = {tl.row} + i;")
        for t, off in enumerate(tl.taps):
            w(f"{{ const float xv = xr[{off}]; "
              + " ".join(f"a{o} += {wj}[{t * ocb + o}] * xv;" for o in range(ocb)) + " }")

    if tl.icg * kk <= UNROLL_TAPS:
        for j in range(tl.icg):
            w.open("")
            taps(str(j), f"(wb + {j * kk * ocb})")
            w.close()
    else:
        w.open(f"for (int j = 0; j < {tl.icg}; ++j)")
        w(f"const float *wj = wb + j*{kk * ocb};")
        taps("j", "wj")
        w.close()
    for o in range(ocb):
        w.open("" if last == ocb or o < last else f"if (ob < {tl.blocks - 1})")
        w(f"const int c = grp*{tl.ocg} + ob*{ocb} + {o};")
        w("(void)c;")
        w(f"float v = a{o};")
        for line in epilogue:
            w(line)
        w(f"{yp}[(c*{ry} + ys)*{tl.w_out} + i] = v;")
        w.close()
    w.close()
    w.close()
