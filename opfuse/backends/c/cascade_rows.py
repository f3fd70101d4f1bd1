"""Row kernels of a cascaded C member (float32) on a vector unit: one output row of a Conv, its
epilogue fused (the ``columns`` and ``channels`` paths of kernelplan/convf.py; a scalar FPU's
members are pixel tiles, pixeltiles.py, the layer-by-layer nest).

``cascade.py`` dispatches a member here; the rows it writes are ``r = a .. b`` of one step. A
value is addressed ``(c*R + row % R)*W + column`` (``R`` rows kept, see ``cascade.py``). The
epilogue arrives as C statements on a scalar ``v`` that may read the channel ``c``, the row
``r`` and the column ``i`` (``cascade.scalar_epilogue``); it runs in the store loop, so every
value is written once, already final.

* **Depthwise** (one input and one output channel per group): the layer-by-layer band core,
  ``dwconv.emit_depthwise_rows``, through ``rowsource.py``.
* **Any other conv** (1x1 included): a *column tile* of ``lanes`` output channels x CB columns
  accumulated over input channels and taps, the CB inputs one contiguous vector and each weight
  a broadcast (packed ``[block][ICg][KH][KW][lanes]``, zero-padded). A 1x1 conv on rows
  narrower than ``convf.NARROW`` (7 or 14 columns, where a vector over columns is mostly empty): a
  *channel tile* of OCV channels x CT columns vectorized over channels, its epilogue applied on
  the tile (with 9 taps the channel tile ran at 5 GF/s, so spatial kernels keep column tiles).
  A 1x1 stride-1 unpadded conv reads the ring rows directly; any other conv first copies the KH
  rows of every input channel, zero-padded and split into column phases, into a line buffer
  once per output row (linebuffer.py), so the tile has no bounds test. A conv whose line
  buffer would exceed ``convf.LINE_FLOATS`` runs the layer-by-layer direct core (``convdirect.emit_direct_rows``) instead.
  The weights are packed by the direct core's one packer (``convdirect.pack_weights``).

Tile sizes were measured on AVX-512 (Zen 4) and AVX2 builds (``-march=x86-64-v3``) of the same
kernels: 4 x 24 (1x1) and 16 x 4 (narrow) keep their sums in AVX2's 16 registers; spatial kernels
keep 8 x 16. Portable C99 that gcc -O3 vectorizes; nothing here names a vector extension.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr
from opfuse.backends.c.convdirect import pack_weights
from opfuse.backends.c.linebuffer import fill_rows
from opfuse.backends.c.rowsource import ring_slot
from opfuse.ir.values import const, static_dims
from opfuse.kernelplan.convf import CHANNEL_LANES, FloatConvPlan

CB, CB_K = 24, 16  # columns of a column tile: 1x1 convs (4 channels), spatial kernels (8)
OCV = CHANNEL_LANES  # output channels per channel tile (1x1 rows narrower than NARROW)
CT = 4  # output columns per channel tile
VEC = 8  # one vector of columns (one AVX2 vector, two NEON ones)


def geometry(node: ir.Node) -> dict:
    """Kernel, stride, dilation and (top, left) padding of a Conv (VALID: no padding)."""
    weight = const(node.inputs[1])
    pads = attr(node, "pads", [0, 0, 0, 0]) or [0, 0, 0, 0]
    if (attr(node, "auto_pad", "NOTSET") or "NOTSET") == "VALID":
        pads = [0, 0, 0, 0]
    return {
        "k": tuple(int(v) for v in weight.shape[2:]),
        "s": tuple(int(v) for v in (attr(node, "strides", [1, 1]) or [1, 1])[:2]),
        "d": tuple(int(v) for v in (attr(node, "dilations", [1, 1]) or [1, 1])[:2]),
        "p": (int(pads[0]), int(pads[1])),
        "group": int(attr(node, "group", 1) or 1),
    }


def bias_of(node: ir.Node) -> np.ndarray | None:
    """The Conv's bias as float32, None when it has none."""
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        return np.asarray(const(node.inputs[2]), np.float32).reshape(-1)
    return None


def store_row(w: CWriter, yp: str, ry: int, w_out: int, epilogue: list[str]) -> None:
    """The epilogue, then ``v`` stored at column ``i`` of output row ``ys`` of channel ``c``."""
    for line in epilogue:
        w(line)
    w(f"{yp}[(c*{ry} + ys)*{w_out} + i] = v;")


def emit_tiled(w: CWriter, node, plan: FloatConvPlan, xp: str, rx: int, yp: str, ry: int,  # noqa: ANN001
               epilogue, params) -> None:  # noqa: ANN001
    """Rows ``a .. b`` of a conv as register tiles (see the module docstring), ``plan``'s
    ``columns`` or ``channels`` (kernelplan/convf.py)."""
    g = geometry(node)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl) = g["k"], g["s"], g["d"], g["p"]
    _, c_in, h_in, w_in = static_dims(node.inputs[0])
    _, c_out, _, w_out = static_dims(node.outputs[0])
    lanes, cb = plan.lanes, CB if kh * kw == 1 else CB_K
    group = g["group"]
    ocg = c_out // group
    blocks = -(-ocg // lanes)
    weight = np.asarray(const(node.inputs[1]), np.float32)
    blocks_of = [(b * lanes, min(lanes, ocg - b * lanes), lanes) for b in range(blocks)]
    packed, _ = pack_weights(weight, group, blocks_of)  # the direct core's packer and layout
    wp = params.weight(f"{node.inputs[1].name}#tile{lanes}", packed)
    bias = bias_of(node)
    bp = None
    if bias is not None:
        padded = np.zeros((group, blocks * lanes), np.float32)
        padded[:, :ocg] = bias.reshape(group, ocg)
        bp = params.weight(f"{node.inputs[2].name}#tile{lanes}", padded.ravel())
    direct = kh * kw == 1 and (sh, sw) == (1, 1) and (pt, pl) == (0, 0)
    # a row shorter than a vector through a line buffer: compute VEC columns (the extra ones
    # read the buffer's zero tail), store w_out; a 7-column tile compiled ~10x slower per MAC
    cols = VEC if lanes != OCV and not direct and w_out < VEC else w_out
    lw = cols + ((kw - 1) * dw) // sw  # kernelplan/convf.line_width
    per_ci = kh * sw * lw
    w.open("for (int r = a; r <= b; ++r)")
    w(f"const int ys = {ring_slot('r', ry)}, xs = {ring_slot('r', rx)};")
    w("(void)xs;")
    if not direct:
        fill_rows(w, channels=c_in, kh=kh, per_ci=per_ci, sw=sw, lw=lw, pl=pl, w_in=w_in,
                  h_in=h_in, first_row=lambda ky: f"r*{sh} - {pt} + {ky * dh}",
                  slot=lambda iy: ring_slot(iy, rx),
                  row=lambda ky: f"{xp} + (ci*{rx} + sl{ky})*{w_in}")
    tile = _Tile(
        taps=[ky * sw * lw + ((kx * dw) % sw) * lw + (kx * dw) // sw
              for ky in range(kh) for kx in range(kw)],  # fmt: skip
        row=(f"{xp} + (ci*{rx} + xs)*{w_in}" if direct else f"line + ci*{per_ci}"),
        wp=wp, bp=bp, group=group, icg=c_in // group, ocg=ocg, blocks=blocks, lanes=lanes,
        w_out=w_out, cols=cols, cb=cb, overlap=params.restrict != "" and kh * kw > 1,
    )  # fmt: skip
    if plan.path == "columns":
        _column_tiles(w, tile, lambda: store_row(w, yp, ry, w_out, epilogue))
    else:
        _channel_tiles(w, tile, epilogue, yp, ry)
    w.close()


class _Tile:
    """Tap offsets into a row, the row of input channel ``ci``, weights, bias, block geometry."""

    def __init__(self, **kw) -> None:  # noqa: ANN003
        self.__dict__.update(kw)


def _blocks(w: CWriter, tl: _Tile) -> None:
    w.open(f"for (int grp = 0; grp < {tl.group}; ++grp) for (int ob = 0; ob < {tl.blocks}; ++ob)")
    w(f"const int blk = grp*{tl.blocks} + ob;")


def _channels(w: CWriter, tl: _Tile) -> None:
    """``for (o ...) { const int c = ...;`` over the block's real (unpadded) channels."""
    last = tl.ocg - (tl.blocks - 1) * tl.lanes
    count = str(tl.lanes) if last == tl.lanes else f"(ob == {tl.blocks - 1} ? {last} : {tl.lanes})"
    w.open(f"for (int o = 0; o < {count}; ++o)")
    w(f"const int c = grp*{tl.ocg} + ob*{tl.lanes} + o;")


def _chunks(w_out: int, cb: int, overlap: bool) -> list[tuple[int, int, int]]:
    """``(count, width, start)`` runs of column chunks covering ``w_out`` columns: full chunks of
    ``cb`` and one remainder chunk; with ``overlap`` (a spatial kernel whose output aliases no
    operand) chunks of ``cb`` only, the last one moved back to end at ``w_out`` (start -1; it
    recomputes a few columns to the same values). Measured: a 3x3 conv's 8-column remainder tile
    compiles to code that took more instructions than its row's 48 other columns, whereas a
    1x1 conv's remainder tile is fast and overlapping chunks cost it more than they save."""
    if w_out <= cb:
        return [(1, w_out, 0)]
    if overlap:
        return [(-(-w_out // cb), cb, -1)]
    full, rest = divmod(w_out, cb)
    return [(full, cb, 0)] + ([(1, rest, full * cb)] if rest else [])


def _column_tiles(w: CWriter, tl: _Tile, store) -> None:  # noqa: ANN001
    """OCB channels x CB columns, vectorized over columns (rows at least NARROW wide)."""
    OCB = tl.lanes  # noqa: N806
    for count, width, start in _chunks(tl.cols, tl.cb, tl.overlap):
        if count == 1:
            w.open("")
            w(f"const int i0 = {start};")
        elif start < 0:  # the last chunk moved back to end at w_out (see _chunks)
            w.open(f"for (int k0 = 0; k0 < {tl.w_out}; k0 += {width})")
            w(f"const int i0 = k0 + {width} <= {tl.w_out} ? k0 : {tl.w_out - width};")
        else:
            w.open(f"for (int i0 = {start}; i0 < {start + count * width}; i0 += {width})")
        _blocks(w, tl)
        w(f"float acc[{OCB}][{width}];")
        init = f"{tl.bp}[blk*{OCB} + o]" if tl.bp else "0.0f"
        w(f"for (int o = 0; o < {OCB}; ++o) for (int t = 0; t < {width}; ++t) acc[o][t] = {init};")
        w.open(f"for (int j = 0; j < {tl.icg}; ++j)")
        w(f"const int ci = grp*{tl.icg} + j;")
        w(f"const float *wj = {tl.wp} + (blk*{tl.icg} + j)*{len(tl.taps) * OCB};")
        w(f"const float *xr = {tl.row} + i0;")
        for t, off in enumerate(tl.taps):  # OCB broadcasts, one vector loop over columns
            w.open("")  # a block: the tap's weights are its own scalars
            w(" ".join(f"const float w{o} = wj[{t * OCB + o}];" for o in range(OCB)))
            w.open(f"for (int t = 0; t < {width}; ++t)")
            w(f"const float xv = xr[{off} + t];")
            w(" ".join(f"acc[{o}][t] += w{o} * xv;" for o in range(OCB)))
            w.close()
            w.close()
        w.close()
        _channels(w, tl)
        w.open(f"for (int t = 0; t < {min(width, tl.w_out)}; ++t)")
        w("const int i = i0 + t;")
        w("float v = acc[o][t];")
        store()
        w.close()
        w.close()
        w.close()
        w.close()


def _channel_tiles(w: CWriter, tl: _Tile, epilogue: list[str], yp: str, ry: int) -> None:
    """OCV channels x CT columns, vectorized over channels (rows narrower than NARROW: a
    vector over 7 or 14 columns would be mostly empty). The epilogue runs on the tile, over
    channels (vectorized, no short compare-and-branch loop over 7 columns), on its way into the
    row buffer ``accb[OCV][W]``; the rows are then copied out. An epilogue that reads a residual
    row (a gather over channels) runs along the rows instead, in the copy."""
    ocv = OCV
    rowwise = any("+ i]" in line for line in epilogue)
    last = tl.ocg - (tl.blocks - 1) * ocv
    count = str(ocv) if last == ocv else f"(ob == {tl.blocks - 1} ? {last} : {ocv})"
    _blocks(w, tl)
    w(f"float accb[{ocv}][{tl.w_out}];")
    w(f"const float *wb = {tl.wp} + blk*{tl.icg * len(tl.taps) * ocv};")
    full, rest = divmod(tl.w_out, CT)
    for n, width, start in ((full, CT, 0), (1 if rest else 0, rest, full * CT)):
        if not n:
            continue
        w.open(f"for (int i0 = {start}; i0 < {start + n * width}; i0 += {width})")
        w(f"float s[{width}][{ocv}];")
        init = f"{tl.bp}[blk*{ocv} + o]" if tl.bp else "0.0f"
        w(f"for (int t = 0; t < {width}; ++t) for (int o = 0; o < {ocv}; ++o) s[t][o] = {init};")
        w.open(f"for (int j = 0; j < {tl.icg}; ++j)")
        w(f"const int ci = grp*{tl.icg} + j;")
        w(f"const float *xr = {tl.row} + i0;")
        w(f"const float *wj = wb + j*{len(tl.taps) * ocv};")
        for t, off in enumerate(tl.taps):
            w.open("")
            w(f"const float *wv = wj + {t * ocv};")
            w(f"#pragma GCC unroll {width}")  # keeps the width x OCV sums in registers
            w(f"for (int t = 0; t < {width}; ++t) {{ const float xv = xr[{off} + t]; "
              f"for (int o = 0; o < {ocv}; ++o) s[t][o] += xv * wv[o]; }}")  # fmt: skip
            w.close()
        w.close()
        w.open(f"for (int t = 0; t < {width}; ++t) for (int o = 0; o < {count}; ++o)")
        w("float v = s[t][o];")
        if not rowwise:
            w(f"const int c = grp*{tl.ocg} + ob*{ocv} + o;")
            w("(void)c;")
            for line in epilogue:
                w(line)
        w("accb[o][i0 + t] = v;")
        w.close()
        w.close()
    _channels(w, tl)
    w.open(f"for (int i = 0; i < {tl.w_out}; ++i)")
    w("float v = accb[o][i];")
    for line in epilogue if rowwise else ():
        w(line)
    w(f"{yp}[(c*{ry} + ys)*{tl.w_out} + i] = v;")
    w.close()
    w.close()
    w.close()
