"""The pointwise family's one loop nest on a vector unit: *column tiles* (the ``columns`` path of
kernelplan/convf.py, and the int8 ``pointwise`` path of kernelplan/conv8.py), layer by layer and
as a cascade member, float or int8.

A tile is ``lanes`` output channels x ``width`` columns of one row, summed over the block's input
channels and the taps: per input channel and tap, each channel's weight is a scalar broadcast and
the ``width`` inputs one contiguous vector, so the loop over the tile's columns is the one gcc
vectorizes (``acc[lanes][width]``). The rows come from the caller as a C pointer to input channel
``ci``'s row (``ColumnTile.row``, formed from a ``RowSource``): a pointwise conv layer by layer
reads its whole ``H*W`` plane as one row (conv.py; the tile's columns run across output rows), a
cascade member one ring row, or the line buffer of a spatial conv's taps (convrows.py: a vector
unit's spatial members, and layer by layer a conv with runtime weights or ending in a pool;
int8/row_tiles.py: the portable int8 spatial conv, layer by layer and cascaded).
Where the ISA has a register tile (``IsaKernels.fma_tile``: x86's zmm/ymm sums kept in registers
across the whole reduction) it replaces the reduction, the portable C in its ``#else``.

The arithmetic is the tile's ``arith`` (arith.py's ``Sums``): float32 (``FLOAT32``, the default),
or int8 inputs and weights widened to int32 products summed in int32 (``int8.pointwise.Int8Sums``:
the input's zero point folded into the bias, so a tile's sums start from it). After the reduction
the caller's ``finish(width)`` writes the epilogue and the store from ``acc[o][t]``, channel
``grp*ocg + ob*lanes + o``, column ``i0 + t``: the layer-by-layer chain (``epilogue.emit_apply``,
vectorized along the tile's columns), a member's scalar epilogue, or int8's requantization
(``arith.finish``) and ``Chain8``.

Weights are packed ``[group][block][ICg][taps][lanes]`` (convdirect.pack_weights, a block's last
channels zero-padded), or, for a conv whose weights are an input, read in ONNX's ``[OC][ICg][taps]``
(then ``lanes`` divides the group's channels).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opfuse.backends.c.arith import FLOAT32, Sums
from opfuse.backends.c.cgen import CWriter


@dataclass(frozen=True)
class ColumnTile:
    """``taps``: offsets of each tap's input from column ``i0`` of the row ``row`` (a C pointer
    to input channel ``ci``'s row); weights ``wp`` (``packed`` or ONNX's) and bias ``bp``
    (``bp[blk*lanes + o]``, zero-padded like the weights, or None); the block geometry; the row's
    ``columns`` in tiles of ``width`` (``overlap``: ``chunks``); ``block``: floats of input a run
    of tiles may read per channel block (0: one tile per channel block); ``arith``: the sums'
    types (module docstring); ``pixel``: the elements between columns (a TFLite graph input's
    channels, read in place in NHWC: ``RowSource.pixel``)."""

    taps: tuple[int, ...]
    row: str
    wp: str
    bp: str | None
    group: int
    icg: int
    ocg: int
    lanes: int
    columns: int
    width: int
    packed: bool = True
    overlap: bool = False
    block: int = 0
    arith: Sums = FLOAT32
    pixel: int = 1

    @property
    def blocks(self) -> int:
        return -(-self.ocg // self.lanes)


def chunks(columns: int, width: int, overlap: bool) -> list[tuple[int, int, int]]:
    """``(count, width, start)`` runs of tiles covering ``columns`` columns: full tiles of
    ``width`` and one remainder tile; with ``overlap`` (a spatial kernel whose output aliases no
    operand) tiles of ``width`` only, the last one moved back to end at ``columns`` (start -1; it
    recomputes a few columns to the same values). Measured: a 3x3 conv's 8-column remainder tile
    compiles to code that took more instructions than its row's 48 other columns, whereas a
    1x1 conv's remainder tile is fast and overlapping tiles cost it more than they save."""
    if columns <= width:
        return [(1, columns, 0)]
    if overlap:
        return [(-(-columns // width), width, -1)]
    full, rest = divmod(columns, width)
    return [(full, width, 0)] + ([(1, rest, full * width)] if rest else [])


def open_blocks(w: CWriter, tl: ColumnTile) -> None:
    """``for (grp ...) for (ob ...) { const int blk = ...;``: every block of every group."""
    w.open(f"for (int grp = 0; grp < {tl.group}; ++grp) for (int ob = 0; ob < {tl.blocks}; ++ob)")
    w(f"const int blk = grp*{tl.blocks} + ob;")


def open_channels(w: CWriter, tl: ColumnTile) -> None:
    """``for (o ...) { const int c = ...;`` over the block's real (unpadded) channels."""
    last = tl.ocg - (tl.blocks - 1) * tl.lanes
    count = (str(last) if last == tl.lanes or tl.blocks == 1
             else f"(ob == {tl.blocks - 1} ? {last} : {tl.lanes})")
    w.open(f"for (int o = 0; o < {count}; ++o)")
    w(f"const int c = grp*{tl.ocg} + ob*{tl.lanes} + o;")


def column_tiles(w: CWriter, tl: ColumnTile, finish: Callable[[int], None],
                 fma=None, ahead: Callable[[int], None] | None = None) -> None:  # noqa: ANN001
    """Every tile of the row (module docstring): ``finish(width)`` after each tile's sums;
    ``fma`` the ISA's register tile (``IsaKernels.fma_tile``) or None; ``ahead(width)`` before
    each tile's sums (a prefetch of what the next tile's epilogue touches) or None."""
    for count, width, start in chunks(tl.columns, tl.width, tl.overlap):
        runs = _runs(count, tl.block // (tl.group * tl.icg * width)) if tl.block else 1
        if runs > 1:  # a run of tiles per channel block: its input stays in cache across them
            w.open(f"for (int q0 = 0; q0 < {count}; q0 += {runs})")
            open_blocks(w, tl)
            w.open(f"for (int q = q0; q < (q0 + {runs} < {count} ? q0 + {runs} : {count}); ++q)")
            w(f"const int i0 = {start} + q*{width};")
        else:
            if count == 1:
                w.open("")
                w(f"const int i0 = {start};")
            elif start < 0:  # the last tile moved back to end at the row's end (see chunks)
                w.open(f"for (int k0 = 0; k0 < {tl.columns}; k0 += {width})")
                w(f"const int i0 = k0 + {width} <= {tl.columns} ? k0 : {tl.columns - width};")
            else:
                w.open(f"for (int i0 = {start}; i0 < {start + count * width}; i0 += {width})")
            open_blocks(w, tl)
        if ahead is not None:
            ahead(width)
        _tile(w, tl, width, fma)
        finish(width)
        w.close()
        w.close()
        if runs > 1:
            w.close()


def _runs(count: int, most: int) -> int:
    """Tiles a run when ``count`` tiles go in runs of at most ``most``, balanced: 32 tiles at
    most 25 a run are two runs of 16, not 25 and 7."""
    most = max(1, min(count, most))
    return -(-count // -(-count // most))


def channel_tiles(w: CWriter, tl: ColumnTile, finish: Callable[[int], None],
                  fma=None) -> None:  # noqa: ANN001
    """The same nest oriented over channels, inside the caller's block (``open_blocks``): every
    tile of the row as ``s[width][lanes]`` (the bias, or zeros), the reduction vectorized over
    the ``lanes`` channels (``reduce_tile``'s ``over_channels``: a row narrower than a vector,
    cascade_rows.py; int8's ``conv_lanes``, int8/row_tiles.py), then ``finish(width)`` on the
    sums; full tiles of ``width``, then the remainder."""
    ocv, ar = tl.lanes, tl.arith
    full, rest = divmod(tl.columns, tl.width)
    for n, width, start in ((full, tl.width, 0), (1 if rest else 0, rest, full * tl.width)):
        if not n:
            continue
        w.open(f"for (int i0 = {start}; i0 < {start + n * width}; i0 += {width})")
        if tl.bp:
            w(f"{ar.acc_type} s[{width}][{ocv}];")
            w(f"for (int t = 0; t < {width}; ++t) for (int o = 0; o < {ocv}; ++o) "
              f"s[t][o] = {tl.bp}[blk*{ocv} + o];")
        else:  # zeros as an initializer: gcc 12's zeroing loop (a memset) made -march=native
            # builds warn that s may be read uninitialized where another member took fma_tile
            w(f"{ar.acc_type} s[{width}][{ocv}] = {{{{{ar.zero}}}}};")
        reduce_tile(w, tl, width, fma, over_channels=True)
        finish(width)
        w.close()


def _tile(w: CWriter, tl: ColumnTile, width: int, fma) -> None:  # noqa: ANN001
    """``acc[lanes][width]``: the bias (or zeros), then every input channel's taps."""
    w(f"{tl.arith.acc_type} acc[{tl.lanes}][{width}];")
    if not tl.packed and not tl.bp:  # ONNX's weights index by channel, not by block
        w("(void)blk;")
    init = f"{tl.bp}[blk*{tl.lanes} + o]" if tl.bp else tl.arith.zero
    w(f"for (int o = 0; o < {tl.lanes}; ++o) for (int t = 0; t < {width}; ++t) acc[o][t] = {init};")
    reduce_tile(w, tl, width, fma)


def reduce_tile(w: CWriter, tl: ColumnTile, width: int, fma=None,  # noqa: ANN001
                over_channels: bool = False) -> None:
    """The tile's reduction over the block's input channels and taps, at columns ``i0 ..`` of
    the row, the vectorized axis a parameter: the columns (``acc[lanes][width]`` += a weight
    broadcast x ``width`` inputs) or, ``over_channels``, the channels (``s[width][lanes]`` += an
    input broadcast x ``lanes`` weights: a row narrower than a vector, cascade_rows.py's channel
    tiles); ``fma`` the ISA's register tile, which takes either orientation."""
    lanes, kk, ar = tl.lanes, len(tl.taps), tl.arith
    at = (lambda i: str(i)) if tl.pixel == 1 else (lambda i: f"({i})*{tl.pixel}")  # noqa: E731
    if tl.packed:
        wj = f"{tl.wp} + (blk*{tl.icg} + j)*{kk * lanes}"
        weight = (lambda o, t, k=0: f"wj[{(k * kk + t) * lanes + o}]")  # noqa: E731
    else:  # ONNX's [OC][ICg][taps]: channel grp*ocg + ob*lanes + o
        wj = f"{tl.wp} + (grp*{tl.ocg} + ob*{lanes})*{tl.icg * kk} + j*{kk}"
        weight = (lambda o, t, k=0: f"wj[{o * tl.icg * kk + k * kk + t}]")  # noqa: E731

    def loops(body: Callable[[], None], first: int = 0) -> None:
        w.open(f"for (int j = {first}; j < {tl.icg}; ++j)")
        w(f"const int ci = grp*{tl.icg} + j;")
        w(f"const {ar.w_type} *wj = {wj};")
        w(f"const {ar.in_type} *xr = {tl.row} + {at('i0')};")
        body()
        w.close()

    def columns() -> None:  # lanes broadcasts, one vector loop over the columns, per tap
        for t, off in enumerate(tl.taps):
            w.open("")  # a block: the tap's weights are its own scalars
            w(" ".join(f"const {ar.term_type} w{o} = {weight(o, t)};" for o in range(lanes)))
            w.open(f"for (int t = 0; t < {width}; ++t)")
            w(f"const {ar.term_type} xv = xr[{at(f'{off} + t')}];")
            w(" ".join(f"acc[{o}][t] += w{o} * xv;" for o in range(lanes)))
            w.close()
            w.close()

    def joined(f: int, step: Callable[[int], None]) -> int:
        """``arith.channels_per_term`` input channels a step (their products one term, each
        tap's ``step(f)``), then the channels left one a step; returns the first of those."""
        whole = tl.icg - tl.icg % f
        if f == 1 or whole == 0:
            return 0
        w.open(f"for (int j = 0; j < {whole}; j += {f})")
        w(f"const {ar.w_type} *wj = {wj};")
        for k in range(f):  # channel ci's row pointer, at ci = each channel of the step
            w(f"const {ar.in_type} *xr{k}; {{ const int ci = grp*{tl.icg} + j + {k}; "
              f"xr{k} = {tl.row} + {at('i0')}; }}")
        step(f)
        w.close()
        return whole

    def joined_columns(f: int) -> None:
        for t, off in enumerate(tl.taps):
            w.open("")
            w(" ".join(f"const {ar.term_type} w{o}_{k} = {weight(o, t, k)};"
                       for k in range(f) for o in range(lanes)))
            w.open(f"for (int t = 0; t < {width}; ++t)")
            w(f"const {ar.term_type} " + ", ".join(f"xv{k} = xr{k}[{at(f'{off} + t')}]"
                                                  for k in range(f)) + ";")
            w(" ".join(f"acc[{o}][t] += {ar.term([f'w{o}_{k} * xv{k}' for k in range(f)])};"
                       for o in range(lanes)))
            w.close()
            w.close()

    def channels(f: int = 1) -> None:  # width broadcasts, one vector loop over the channels
        # per term: ``f`` input channels' products at a tap (rows xr0.., weights a channel
        # apart), or one channel's products at ``channels_per_term`` taps (an odd channel left)
        taps = list(enumerate(tl.taps))
        if f == 1 and ar.channels_per_term > 1:
            per = ar.channels_per_term
            terms = [[(0, t, off) for t, off in taps[i:i + per]] for i in range(0, kk, per)]
        else:
            terms = [[(k, t, off) for k in range(f)] for t, off in taps]
        for products in terms:
            names = [""] if len(products) == 1 else [str(i) for i in range(len(products))]
            w.open("")
            for i, (k, t, _) in zip(names, products, strict=True):
                w(f"const {ar.w_type} *wv{i} = wj + {(k * kk + t) * lanes};")
            w(f"#pragma GCC unroll {width}")  # keeps the width x lanes sums in registers
            xr = [""] if f == 1 else [str(k) for k in range(f)]
            xv = ", ".join(f"xv{i} = xr{xr[k]}[{at(f'{off} + t')}]"
                           for i, (k, _, off) in zip(names, products, strict=True))
            term = ar.term([f"xv{i} * wv{i}[o]" for i in names])
            w(f"for (int t = 0; t < {width}; ++t) {{ const {ar.term_type} {xv}; "
              f"{ar.loop_channels}for (int o = 0; o < {lanes}; ++o) s[t][o] += {term}; }}")
            w.close()

    if over_channels:
        portable, acc, rows, vector = channels, "s", width, lanes
        terms = [(c, f"xr[{off + c}]", f"wj + {t * lanes}" if t else "wj")
                 for t, off in enumerate(tl.taps) for c in range(width)]
    else:
        portable, acc, rows, vector = columns, "acc", lanes, width
        terms = [(o, weight(o, t), f"xr + {off}" if off else "xr")
                 for t, off in enumerate(tl.taps) for o in range(lanes)]
    if fma is None or not fma(w, acc, rows, vector, loops, terms, portable):
        first = joined(ar.channels_per_term, channels if over_channels else joined_columns)
        if first < tl.icg:
            loops(portable, first)
