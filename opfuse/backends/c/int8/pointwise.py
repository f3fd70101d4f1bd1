"""The portable int8 pointwise conv (a 1x1 stride-1 unpadded Conv, kernelplan/conv8.py's
``pointwise`` path) as the pointwise family's column tiles (opfuse/backends/c/pointwise.py), the
nest the float pointwise conv is written with: ``ocb`` output channels x ``tile`` pixels of an
image's plane read as one row, summed over the group's input channels, a weight broadcast against
a contiguous vector of inputs; on a plane too small for that (the ``conv_lanes`` path) the same
nest oriented over channels (``channel_tiles``: ``tile`` pixels x ``ocb`` channels, an input
broadcast against a vector of weights; ``emit_tiles`` picks by the plan). Its arithmetic is ``Int8Sums``: int8 weights and int8 (or uint8)
inputs widened to int32 products summed in int32, from a bias with the input's zero point folded
in (no tap is padded: ``sum (x - z_x) w = sum x w - z_x sum w``), finished by the one int8
requantization (int8/output.py), then the layer's ``Chain8`` and the store."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.ctype import INT32, CType
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import Requant
from opfuse.backends.c.int8.output import requant_clamp
from opfuse.backends.c.pointwise import (
    ColumnTile,
    channel_tiles,
    column_tiles,
    open_blocks,
    open_channels,
)
from opfuse.backends.c.rowsource import RowSource
from opfuse.backends.c.tensors import Params
from opfuse.kernelplan.conv8 import ConvGeom, ConvPlan


@dataclass(frozen=True)
class Int8Sums:
    """The int8 record of ``arith.Sums``: int8 (``in_type``: or uint8) inputs and int8 weights,
    each widened to an int32 term, int32 sums; ``finish``: channel ``c``'s sum requantized,
    plus z_y, clamped to ``yct`` (``output.requant_clamp``)."""

    in_type: str
    rq: Requant
    zy: int
    yct: CType
    channels_per_term: int = 1  # 2: ``pairs_fit_int16``
    acc_type = "int32_t"
    w_type = "int8_t"
    term_type = "int32_t"
    zero = "0"
    # a channel tile's loop over its lanes kept whole: unrolled first (gcc 12, -O3), its 16
    # int8 x int32 products were left scalar, the stem of kws_ref_model 4x slower
    loop_channels = '_Pragma("GCC unroll 1") '

    def term(self, products: list[str]) -> str:
        """Several products summed in int16 (exact: ``pairs_fit_int16``), which gcc vectorizes
        as 8 16-bit lanes, then widened once into the int32 sum."""
        return products[0] if len(products) == 1 else f"(int16_t)({' + '.join(products)})"

    def finish(self, w: CWriter, acc: str, doubled: bool | None = None) -> None:  # noqa: ARG002
        """``int32_t v``: ``acc`` (bias included) of channel ``c`` as the output's integer."""
        w(f"int32_t v = {requant_clamp(self.rq, acc, 'c', self.zy, self.yct)};")


def pairs_fit_int16(in_type: str, weights: np.ndarray) -> bool:
    """Whether two products of an int8 input and a weight always sum inside int16: every weight
    in [-127, 127] (TFLite's symmetric int8 weights), so |x w| <= 128 * 127 and two of them at
    most 32512. Measured on a 64 -> 64 channel 48x48 pointwise conv built with
    -march=x86-64-v2: pairs of input channels a term took 0.54 ms where one took 0.71."""
    return in_type == "int8_t" and int(weights.min(initial=0)) >= -127 \
        and int(weights.max(initial=0)) <= 127


def folded_bias(params: Params, key: str, bias: np.ndarray, weights: np.ndarray,
                zx: int) -> str:
    """The int32 bias with ``-z_x`` times each channel's weight sum folded in (weights
    ``[OC][...]``), stored under ``key``."""
    folded = bias - zx * weights.astype(np.int64).reshape(len(bias), -1).sum(axis=1)
    return params.weight(key, folded.astype(np.int32), INT32)


def tile_sums(plan: ConvPlan) -> str:
    """A tile's sum of channel ``o``, column ``t``: ``acc[o][t]`` of a column tile, ``s[t][o]``
    of a channel tile (``conv_lanes``)."""
    return "s[t][o]" if plan.path == "conv_lanes" else "acc[o][t]"


def emit_tiles(w: CWriter, plan: ConvPlan, tl: ColumnTile, finish) -> None:  # noqa: ANN001
    """Every tile of ``tl``'s row, then ``finish(width)``: column tiles, or on the
    ``conv_lanes`` path channel tiles in every block of every group."""
    if plan.path != "conv_lanes":
        column_tiles(w, tl, finish)
        return
    open_blocks(w, tl)
    channel_tiles(w, tl, finish)
    w.close()


def emit_pointwise8(w: CWriter, g: ConvGeom, plan: ConvPlan, src: RowSource, wt: str,
                    b: str, sums: Int8Sums, chain: Chain8 | None, rank: int, y: str) -> None:
    """Every image's tiles (``emit_tiles``): ``plan.ocb`` channels (weights ``wt`` packed
    ``[OC/ocb][ICg][ocb]``, ``conv.packed_weights``; the folded bias ``b``) x ``plan.tile``
    pixels of the input ``src`` (NCHW, or a graph input's NHWC read in place), into the NCHW
    output ``y`` through ``chain`` (``rank`` 3: a 1-D conv's coordinates)."""
    plane = g.oh * g.ow
    tl = ColumnTile(taps=(0,), row=src.channel("n", "ci"), wp=wt, bp=b, group=g.group,
                    icg=g.icg, ocg=g.ocg, lanes=plan.ocb, columns=plane, width=plan.tile,
                    arith=sums, pixel=src.pixel)
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    emit_tiles(w, plan, tl, lambda width: store_tile(w, tl, g, sums, chain, rank, y, width,
                                                     acc=tile_sums(plan)))
    w.close()


def store_tile(w: CWriter, tl: ColumnTile, g: ConvGeom, sums: Int8Sums, chain: Chain8 | None,
               rank: int, y: str, width: int, oh: str | None = None, b0: str = "",
               acc: str = "acc[o][t]") -> None:
    """A tile's ``finish``: each channel's ``width`` sums ``acc`` requantized (``sums.finish``),
    through ``chain``, stored at column ``i0 + t`` of image ``n``'s NCHW output ``y``: of its
    plane read as one row, or (``oh``) of output row ``oh``, from its column ``b0`` (a band of
    the row)."""
    yt = sums.yct.name
    open_channels(w, tl)
    row = f" + {oh}*{g.ow}" if oh is not None else ""
    i0 = f"{b0} + i0" if b0 else "i0"
    w(f"{yt} *yr = {y} + (n*{g.oc} + c)*{g.oh * g.ow}{row} + {i0};")
    w.open(f"for (int t = 0; t < {width}; ++t)")
    sums.finish(w, acc)
    if chain is not None:
        hw = [oh, f"{i0} + t"] if oh is not None else [f"(i0 + t) / {g.ow}", f"(i0 + t) % {g.ow}"]
        v = chain.emit(w, "v", ["n", "c", *hw] if rank == 4 else ["n", "c", hw[1]])
        w(f"v = {v};")
    w(f"yr[t] = ({yt})v;")
    w.close()
    w.close()
