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
* **Any other conv** (1x1 included): pointwise.py's *column tiles* (the layer-by-layer pointwise
  conv's nest) of ``lanes`` output channels x ``columns`` columns of the row, accumulated over
  input channels and taps, the inputs one contiguous vector and each weight a broadcast (packed
  ``[block][ICg][KH][KW][lanes]``, zero-padded), the ISA's register tile where it has one. A 1x1
  conv on rows narrower than ``convf.NARROW`` (7 or 14 columns, where a vector over columns is
  mostly empty): a *channel tile*, the same reduction vectorized over ``lanes`` channels x
  ``columns`` columns, its epilogue applied on the tile (with 9 taps the channel tile ran at 5
  GF/s, so spatial kernels keep column tiles).
  A 1x1 stride-1 unpadded conv reads the ring rows directly; any other conv first copies the KH
  rows of every input channel, zero-padded and split into column phases, into a line buffer
  once per output row (linebuffer.py), so the tile has no bounds test. A conv whose line
  buffer would exceed ``convf.LINE_FLOATS`` runs the layer-by-layer direct core (``convdirect.emit_direct_rows``) instead.
  The weights are packed by the direct core's one packer (``convdirect.pack_weights``).

Tile sizes (kernelplan/convf.py) were measured on AVX-512 (Zen 4) and AVX2 builds
(``-march=x86-64-v3``) of the portable C: 4 x 24 (1x1) and 16 x 4 (narrow) keep their sums in
AVX2's 16 registers; spatial kernels keep 8 x 16; under x86's register tile a 1x1 member takes
8 x 16. Nothing here names a vector extension.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr
from opfuse.backends.c.convdirect import pack_weights
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.linebuffer import fill_rows
from opfuse.backends.c.pointwise import (
    ColumnTile,
    column_tiles,
    open_blocks,
    open_channels,
    reduce_tile,
)
from opfuse.backends.c.rowsource import ring_slot
from opfuse.ir.values import const, static_dims
from opfuse.kernelplan.convf import FloatConvPlan

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
    lanes = plan.lanes
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
    cols = VEC if plan.path == "columns" and not direct and w_out < VEC else w_out
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
    tile = ColumnTile(
        taps=tuple(ky * sw * lw + ((kx * dw) % sw) * lw + (kx * dw) // sw
                   for ky in range(kh) for kx in range(kw)),  # fmt: skip
        row=(f"{xp} + (ci*{rx} + xs)*{w_in}" if direct else f"line + ci*{per_ci}"),
        wp=wp, bp=bp, group=group, icg=c_in // group, ocg=ocg, lanes=lanes, columns=cols,
        width=plan.columns, overlap=params.restrict != "" and kh * kw > 1,
    )  # fmt: skip
    if plan.path == "columns":
        def finish(width: int) -> None:
            open_channels(w, tile)
            w.open(f"for (int t = 0; t < {min(width, w_out)}; ++t)")
            w("const int i = i0 + t;")
            w("float v = acc[o][t];")
            store_row(w, yp, ry, w_out, epilogue)
            w.close()
            w.close()

        column_tiles(w, tile, finish, kernels(params.store.isa).fma_tile)
    else:
        _channel_tiles(w, tile, epilogue, yp, ry, kernels(params.store.isa).fma_tile)
    w.close()


def _channel_tiles(w: CWriter, tl: ColumnTile, epilogue: list[str], yp: str, ry: int,
                   fma=None) -> None:  # noqa: ANN001
    """``lanes`` channels x ``width`` columns, vectorized over channels (rows narrower than NARROW: a
    vector over 7 or 14 columns would be mostly empty). The epilogue runs on the tile, over
    channels (vectorized, no short compare-and-branch loop over 7 columns), on its way into the
    row buffer ``accb[lanes][W]``; the rows are then copied out. An epilogue that reads a residual
    row (a gather over channels) runs along the rows instead, in the copy. The reduction is the
    column tiles' (``pointwise.reduce_tile``) over the channels, under the ISA's register tile
    ``fma`` where it has one (x86: a chain of 14-column rows cascaded with no minimum row width,
    two 96 -> 32 -> 96 blocks, 1.05x)."""
    ocv, w_out = tl.lanes, tl.columns
    rowwise = any("+ i]" in line for line in epilogue)
    last = tl.ocg - (tl.blocks - 1) * ocv
    count = (str(last) if last == ocv or tl.blocks == 1
             else f"(ob == {tl.blocks - 1} ? {last} : {ocv})")
    open_blocks(w, tl)
    w(f"float accb[{ocv}][{w_out}];")
    full, rest = divmod(w_out, tl.width)
    for n, width, start in ((full, tl.width, 0), (1 if rest else 0, rest, full * tl.width)):
        if not n:
            continue
        w.open(f"for (int i0 = {start}; i0 < {start + n * width}; i0 += {width})")
        if tl.bp:
            w(f"float s[{width}][{ocv}];")
            w(f"for (int t = 0; t < {width}; ++t) for (int o = 0; o < {ocv}; ++o) "
              f"s[t][o] = {tl.bp}[blk*{ocv} + o];")
        else:  # zeros as an initializer: gcc 12's zeroing loop (a memset) made -march=native
            # builds warn that s may be read uninitialized where another member took fma_tile
            w(f"float s[{width}][{ocv}] = {{{{0.0f}}}};")
        reduce_tile(w, tl, width, fma, over_channels=True)
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
    open_channels(w, tl)
    w.open(f"for (int i = 0; i < {w_out}; ++i)")
    w("float v = accb[o][i];")
    for line in epilogue if rowwise else ():
        w(line)
    w(f"{yp}[(c*{ry} + ys)*{w_out} + i] = v;")
    w.close()
    w.close()
    w.close()
