"""Register-blocked direct convolution with constant weights (any kernel, stride, dilation, padding,
groups), vectorized over output channels; the epilogue runs on the register tile before the store.

The output tile is ``acc[PT][OCV]``: PT output pixels of one output row times OCV output channels.
Weights are repacked at compile time to ``[group][block][ICg][KH][KW][OCV]`` (a block's last
channels zero-padded), so for one input channel and kernel tap the OCV weights are one contiguous
vector; each input pixel is a scalar broadcast. Per (ic, kh) the generated loop over the OCV lanes
holds PT*KW fused multiply-adds whose input offsets are compile-time constants, so gcc -O3
vectorizes it over the lanes and keeps the whole tile in registers across the reduction.

Horizontal padding costs nothing at run time: the row is cut into tiles at compile-time columns and
a tap that would read outside the row is simply not emitted for that tile (runs of tiles with the
same taps share one loop). Rows above/below the input are skipped per kernel row.

After the reduction the tile (+ bias) goes through the fused epilogue chain and is stored once.
"""

from __future__ import annotations

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.epilogue import Chain, emit_apply
from opfuse.backends.c.rowsource import RowSink, RowSource, ring_offset
from opfuse.kernelplan.convf import DIRECT_LANES, oc_blocks

LANES = DIRECT_LANES  # a block's channel count is padded to a multiple of this (convf.oc_blocks)
WIDE_PIXELS = 12  # pixels of a 32-channel tile under an ISA's FMA tile: 24 sums of 16 lanes
WIDE_WEIGHTS = 32 * 1024  # for a weight block this large (each tile reads it from L2)
PREFETCH_BYTES = 256 * 1024  # packed weights larger than this are prefetched a block ahead
PREFETCH_INPUT = 512 * 1024  # when the input is at most this (it stays in L2 beside two blocks)


def pack_weights(arr: np.ndarray, group: int, blocks: list[tuple[int, int, int]] | None = None,
                 ) -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
    """The one packer of float conv weights: ``[group][block][ICg][KH][KW][lanes]``, and per
    block (first channel, channels, lanes, offset in the packed array).

    ``arr`` is ONNX ``[OC][ICg][KH][KW]``; ``blocks`` the (first channel, channels, lanes) of one
    group's output-channel blocks (default ``oc_blocks``), a block's channels past its own
    zero-padded to ``lanes``; blocks repeat per group at the same offsets plus the group's
    stride (the returned offsets are for group 0; the group stride is ``size // group``)."""
    oc, icg, kh, kw = arr.shape
    ocg = oc // group
    blocks = oc_blocks(ocg) if blocks is None else blocks
    parts, meta, off = [], [], 0
    for start, width, ocv in blocks:
        meta.append((start, width, ocv, off))
        off += icg * kh * kw * ocv
    for grp in range(group):
        for start, width, ocv in blocks:
            sub = arr[grp * ocg + start : grp * ocg + start + width].astype(np.float32)
            pad = np.zeros((ocv, icg, kh, kw), np.float32)
            pad[:width] = sub
            parts.append(pad.transpose(1, 2, 3, 0).ravel())
    return np.concatenate(parts), meta


def row_tiles(ow: int, most: int = 8, even: bool = False) -> list[tuple[int, int]]:
    """(first column, width) of the pixel tiles of one output row, at most ``most`` wide;
    ``even``: the fewest tiles, their widths differing by at most one."""
    if ow <= most:
        return [(0, ow)]
    if even:
        count = -(-ow // most)
        widths = [ow // count + (i < ow % count) for i in range(count)]
        return [(sum(widths[:i]), pw) for i, pw in enumerate(widths)]
    pt = next((d for d in range(most, most // 2, -1) if ow % d == 0), most)
    return [(c0, min(pt, ow - c0)) for c0 in range(0, ow, pt)]


def _taps(g, c0: int, pt: int) -> tuple[tuple[int, int, int], ...]:
    """The (pixel, kernel column, input offset from the tile's first input column) taps that read
    inside the row for the tile starting at output column ``c0``."""
    out = []
    for p in range(pt):
        for kw in range(g.k[1]):
            iw = (c0 + p) * g.s[1] - g.p[1] + kw * g.d[1]
            if 0 <= iw < g.iw:
                out.append((p, kw, iw - c0 * g.s[1]))
    return tuple(out)


def tile_runs(g, ocv: int, wide: bool = False) -> list[tuple[int, int, int, tuple]]:
    """Runs of consecutive tiles with the same width and taps: (first column, width, count, taps).

    A tile holds PT x OCV accumulators: 16 x 16 or 8 x 32 (16 512-bit registers); ``wide`` (the
    ISA's FMA tile keeps its sums in registers): up to WIDE_PIXELS x 32, the row cut in even
    tiles."""
    runs: list[list] = []
    most = 16 if ocv <= 16 else WIDE_PIXELS if wide else 8
    for c0, pt in row_tiles(g.ow, most, wide and ocv > 16):
        taps = _taps(g, c0, pt)
        last = runs[-1] if runs else None
        if last is not None and last[1] == pt and last[3] == taps:
            last[2] += 1
        else:
            runs.append([c0, pt, 1, taps])
    return [tuple(r) for r in runs]


def _kh_always_valid(g) -> bool:
    return all(0 <= oh * g.s[0] - g.p[0] + kh * g.d[0] < g.ih
               for oh in range(g.oh) for kh in range(g.k[0]))


def emit_direct(w: CWriter, g, x: str, wp: str, meta, b: str | None, chain: Chain, y: str,  # noqa: ANN001
                transpose=None, fma=None) -> None:  # noqa: ANN001
    """The layer-by-layer kernel (see the module docstring); ``wp`` the packed weights from
    pack_weights; ``transpose`` the ISA's tile store (``IsaKernels.tile_transpose``) or None;
    ``fma`` the ISA's register tile reduction (``IsaKernels.fma_tile``) or None."""
    vs = [(o.strides[0], o.strides[2], o.strides[3], o.strides[1]) for o in chain.operands]
    bias = f" + {b}[oc0 + o]" if b is not None else ""

    # the chain per channel on the transposed registers where it reads a residual operand (its
    # NCHW row contiguous there, strided across channel planes in ``acc``)
    steps = None if transpose is None else chain.channel_steps(
        ["n", "oc0", "oh", "c0"], g.oh * g.ow, None if b is None else f"{b} + oc0")
    if steps is not None and not any(kind == "add" for kind, _ in steps):
        steps = None

    def finish(pt: int, width: int, ocv: int) -> None:  # epilogue over the lanes, in place
        def scalar() -> None:
            w.open(f"for (int p = 0; p < {pt}; ++p)")
            emit_apply(w, chain, vs, ["n", "oh", "c0 + p", "oc0"], width,
                       lambda i: f"acc[p][{i}]{bias}", lambda i: f"acc[p][{i}]", var="o")
            w.close()

        store = (f"for (int o = 0; o < {width}; ++o) for (int p = 0; p < {pt}; ++p) "
                 f"{y}[((n*{g.oc} + oc0 + o)*{g.oh} + oh)*{g.ow} + c0 + p] = acc[p][o];")
        at = f"{y} + ((n*{g.oc} + oc0)*{g.oh} + oh)*{g.ow} + c0"
        plane = g.oh * g.ow
        if steps is not None and transpose(w, "acc", pt, ocv, width, at, plane, store, steps,
                                           scalar):
            return
        scalar()
        if transpose is None or not transpose(w, "acc", pt, ocv, width, at, plane, store):
            w(store)

    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    _blocks(w, g, RowSource.of(x, g.c, g.ih, g.iw), "n", wp, meta, finish, None, fma)
    w.close()


def emit_direct_rows(w: CWriter, g, src: RowSource, wp: str, meta, b: str | None,  # noqa: ANN001
                     sink: RowSink, fma=None) -> None:  # noqa: ANN001
    """Rows ``a .. b`` (C variables of a cascade step) from ``src``, stored through ``sink``: the
    same blocks and tiles; the ring's row slots are formed once per output row (``ro``)."""
    bias = f" + {b}[c]" if b is not None else ""
    dst = sink.dst

    def finish(pt: int, width: int, ocv: int) -> None:  # the epilogue in the store loop
        del ocv  # along the row
        w.open(f"for (int o = 0; o < {width}; ++o)")
        w(f"float *yr = {dst.channel('0', 'oc0 + o')} + ys*{dst.width} + c0;")
        w.open(f"for (int p = 0; p < {pt}; ++p)")
        w("const int c = oc0 + o, i = c0 + p;")
        w("(void)c; (void)i;")
        w(f"float v = acc[p][o]{bias};")
        for line in sink.epilogue:
            w(line)
        w("yr[p] = v;")
        w.close()
        w.close()

    _blocks(w, g, src, "0", wp, meta, finish, dst, fma)


def _blocks(w: CWriter, g, src: RowSource, n: str, wp: str, meta, finish, dst,  # noqa: ANN001
            fma=None) -> None:  # noqa: ANN001
    """Per group and weight block, every output row (``dst`` None: the whole output, else the
    cascade step's rows into the ring ``dst``) as runs of tiles."""
    group_size = sum(g.icg * g.k[0] * g.k[1] * ocv for _, _, ocv, _ in meta)
    w.open(f"for (int grp = 0; grp < {g.group}; ++grp)")
    w(f"const float *xg = {src.channel(n, f'grp*{g.icg}')};")
    full = [m for m in meta if m[2] == m[1] and m[1] == meta[0][1]]
    classes = []
    if len(full) > 1:
        classes.append((full, True))
    classes += [([m], False) for m in meta if not (len(full) > 1 and m in full)]
    for blocks, looped in classes:  # weight block outermost: each is read from memory once
        start, width, ocv, off = blocks[0]
        size = g.icg * g.k[0] * g.k[1] * ocv
        w.open("")
        if looped:
            w.open(f"for (int ob = 0; ob < {len(blocks)}; ++ob)")
            w(f"const int ocl = {start} + ob*{width};")
            w(f"const float *wb = {wp} + grp*{group_size} + {off} + ob*{size};")
        else:
            w(f"const int ocl = {start};")
            w(f"const float *wb = {wp} + grp*{group_size} + {off};")
        w(f"const int oc0 = grp*{g.ocg} + ocl;")
        lb = line_buffer(g) if dst is None else 0
        if lb:
            w(f"float lb[{g.icg * g.k[0] * lb}] OPFUSE_ALIGNED;")
            w("int next = 0;")
        runs = tile_runs(g, ocv, fma is not None and g.k == (1, 1) and g.s == (1, 1)
                         and size * 4 >= WIDE_WEIGHTS)
        ahead = None
        if (looped and dst is None and fma is not None and group_size * g.group * 4 > PREFETCH_BYTES
                and g.c * g.ih * g.iw * 4 <= PREFETCH_INPUT):
            ahead = _prefetch(w, g, runs, size, len(blocks))
        if dst is None:
            w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
        else:
            w.open("for (int oh = a; oh <= b; ++oh)")
            w(f"const int r = oh, ys = {dst.slot('oh')};")
            w("(void)r;")
            _ring_rows(w, g, src)
        if lb:
            _fill(w, g, lb)
        for c0, pt, count, taps in runs:
            _tile(w, g, c0, pt, count, taps, ocv, width, finish, src, lb, dst is not None, fma,
                  ahead)
        w.close()
        if looped:
            w.close()
        w.close()
    w.close()


def _prefetch(w: CWriter, g, runs, size: int, blocks: int) -> tuple[str, int] | None:  # noqa: ANN001
    """``pf``: the next weight block (the last block: its own), which the tiles of this block
    prefetch a little of at every reduction step (``IsaKernels.fma_tile``'s ``prefetch``), so the
    whole of it is on its way to L2 by the time this block ends. A late layer's weights are read
    once an inference from memory (ResNet-50's 512 -> 2048 on 7x7: 4 MB over 49 pixels), and the
    hardware prefetcher stops at each 4 KB page; (pointer, floats a step) or None."""
    steps = g.oh * sum(count for _, _, count, _ in runs) * g.icg * g.k[0]
    if size < steps:
        return None
    w(f"const float *pf = wb + (ob + 1 < {blocks} ? {size} : 0);")
    w("(void)pf;")
    return "pf", size // steps


def _ring_rows(w: CWriter, g, src: RowSource) -> None:  # noqa: ANN001
    """``ro[kh]``: the offset of the input row kernel row ``kh`` reads (-1: outside the input)."""
    w(f"int ro[{g.k[0]}];")
    w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
    w(f"const int ih = oh*{g.s[0]} - {g.p[0]} + kh*{g.d[0]};")
    w(f"ro[kh] = ih >= 0 && ih < {g.ih} ? {src.row('ih')} : -1;")
    w.close()


def line_buffer(g) -> int:
    """The padded row length of a line buffer for this conv, or 0 for none.

    When the input planes lie a multiple of 4 KB apart (e.g. 256x256 float planes: 256 KB), the
    same row of every plane falls in the same cache set, of L1 (8-way) and of a 256 KB 16-way
    L2 alike; with more planes than ways, a row is evicted before the next output row reads it
    again and every input line is fetched from memory ~KH times. Then the KH input rows a
    output row needs are kept in a ring buffer on the stack (ICg x KH rows, padded by a cache
    line so they do not alias): each input row is copied in once (one streaming read of the
    input) and the tiles read the buffer from cache. Only for vertical stride and dilation 1
    and a buffer of at most 64 KB."""
    plane = g.ih * g.iw * 4
    iwp = -(-g.iw // 16) * 16 + 16
    if (g.s[0] != 1 or g.d[0] != 1 or plane % 4096 or g.icg * g.k[0] <= 8 or g.k[0] < 2
            or g.icg * g.k[0] * iwp * 4 > 64 * 1024):
        return 0
    return iwp


def _fill(w: CWriter, g, iwp: int) -> None:
    """Copy the input rows the output row ``oh`` needs that are not in the ring buffer yet."""
    kh = g.k[0]
    last = f"oh - {g.p[0]} + {kh - 1}"
    w.open(f"for (; next <= {last} && next < {g.ih}; ++next)")
    w(f"for (int ic = 0; ic < {g.icg}; ++ic) memcpy(lb + {ring_offset('ic', 'next', kh, iwp)}, "
      f"xg + ic*{g.ih * g.iw} + next*{g.iw}, {g.iw * 4}u);")
    w.close()
    w(f"int ro[{kh}];")
    w(f"for (int kh = 0; kh < {kh}; ++kh) "
      f"ro[kh] = (((oh - {g.p[0]} + kh) % {kh} + {kh}) % {kh})*{iwp};")


def _tile(w: CWriter, g, c0: int, pt: int, count: int, taps, ocv: int, width: int, finish,  # noqa: ANN001
          src: RowSource, lb: int = 0, ring: bool = False, fma=None,  # noqa: ANN001
          ahead: tuple[str, int] | None = None) -> None:
    kk = g.k[0] * g.k[1]
    if count > 1:
        w.open(f"for (int t = 0; t < {count}; ++t)")
        w(f"const int c0 = {c0} + t*{pt};")
    else:
        w.open("")
        w(f"const int c0 = {c0};")
    w(f"float acc[{pt}][{ocv}];")
    w(f"for (int p = 0; p < {pt}; ++p) for (int o = 0; o < {ocv}; ++o) acc[p][o] = 0.0f;")
    valid = _kh_always_valid(g)

    def loops(body) -> None:  # noqa: ANN001
        w.open(f"for (int ic = 0; ic < {g.icg}; ++ic)")
        if lb:
            w(f"const float *xc = lb + ic*{g.k[0] * lb} + c0*{g.s[1]};")
        else:
            w(f"const float *xc = xg + ic*{src.stride} + c0*{g.s[1]};")
        w(f"const float *wc = wb + ic*{kk * ocv};")
        w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
        if ring:
            if not valid:
                w("if (ro[kh] < 0) continue;")
        else:
            if not (lb and valid):
                w(f"const int ih = oh*{g.s[0]} - {g.p[0]} + kh*{g.d[0]};")
            if not valid:
                w(f"if (ih < 0 || ih >= {g.ih}) continue;")
        w(f"const float *xr = xc + {'ro[kh]' if lb or ring else f'ih*{g.iw}'};")
        w(f"const float *wk = wc + kh*{g.k[1] * ocv};")
        body()
        w.close()
        w.close()

    def portable() -> None:
        w.open(f"for (int o = 0; o < {ocv}; ++o)")
        for kw in sorted({kw for _, kw, _ in taps}):
            w(f"const float w{kw} = wk[{kw * ocv} + o];")
        for p, kw, off in taps:
            w(f"acc[{p}][o] += xr[{off}] * w{kw};")
        w.close()

    terms = [(p, f"xr[{off}]", f"wk + {kw * ocv}") for p, kw, off in taps]
    if fma is None or not fma(w, "acc", pt, ocv, loops, terms, portable, prefetch=ahead):
        loops(portable)
    finish(pt, width, ocv)  # the epilogue on the register tile and the single store
    w.close()
