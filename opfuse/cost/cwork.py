"""The work of one int8 kernel as opfuse's generated C does it (docs/architecture.md, the cost row),
for the ``host`` target's int8 figures (``[perf.int8c]``, ``opfuse.cost.int8c``).

A MAC count alone misprices the int8 C by up to 3x across layer shapes: its templates
(``opfuse.backends.c.int8.conv``) vectorize one loop and pay for whole vectors, and they
requantize every output on its own. So a kernel's work is counted in three parts, as its template
loops:

- ``lane_macs`` and ``tail_macs``: multiply-accumulates in whole vectors of ``LANES`` int32
  lanes along the loop the compiler vectorizes, and those of its scalar remainder (trip count mod
  ``LANES``), which run several times slower: a block of the plan's ``ocb`` output channels (the
  channel-lanes path: short rows, or a pointwise plane under one pixel tile), the pixel tiles of
  a pointwise conv, the output row of any other conv (a depthwise conv's too), the K reduction of a Gemm. A
  depthwise row of 5 pixels is all tail; a pointwise tile of 61 pixels is 48 + 13;
- ``outputs``: output elements, each requantized (int32 -> int8: a 64-bit multiply, a rounding
  shift, a clamp) and run through the fused epilogue;
- ``loops``: the template's innermost vector loops started (per tap of an output row and channel
  block, per input channel of a pixel tile, per tap and input channel of a channel tile of the
  channel-lanes path, the plan's ``tile`` columns, per Gemm output, per output row of a depthwise conv, per window row of a pooled output): the
  set-up that does not scale with the MACs.

An int8 MaxPool/AveragePool counts its loop trips (``pool_work``), a depthwise conv the x86
ISA writes in vectors of pixels its ``vpdpbusd`` and vectors (``x86_depthwise_work``, path
``depthwise_zmm``). Other kernels without an anchor (elementwise, softmax, movement) count their
output elements, with ``lane_macs`` = their FLOPs (the cost model's count), on their class's path; a
QuantizeLinear / DequantizeLinear converts each element (no MACs), a Softmax runs the ``other``
path (its table lookups are not a reduction's sums). Each item of
work names the template path it runs on (``PATHS``): the rates differ per path, not per class (a
1x1 conv on a 3x3 plane runs the channel-lanes path, on a 40x40 plane the pixel-tile path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx_ir as ir

from opfuse import ops
from opfuse.cost.kclass import node_class
from opfuse.ir.values import const, static_dims
from opfuse.kernelplan.conv8 import (
    GEMV_LANES,
    LANES,
    Conv8,
    ConvGeom,
    gemv_blocks,
    plan_conv8,
    uses_gemv8,
)
from opfuse.kernelplan.dw8 import dw_count, uses_dw_vectors
from opfuse.targets.int8c import PATHS

__all__ = ["PATHS", "Work", "gemv_work", "is_view", "kernel_work", "node_work"]

# The C template paths, each with its own rates in [perf.int8c] (opfuse.targets.int8c): a conv
# vectorized over its output channels (short rows), over pointwise pixel tiles, over its output
# rows (dense, depthwise); a Gemm's dot products, or the ISA's GEMV for one row (gemv_work); an
# unanchored kernel runs its class's loop; a fused epilogue op that is not a clamp (a residual
# Add) costs per output on top of its anchor.


@dataclass(frozen=True)
class Work:
    lane_macs: float
    outputs: int
    loops: int
    path: str = "other"
    tail_macs: int = 0  # the MACs of each vector loop's scalar remainder (its trip count % LANES)


def _split(n: int) -> tuple[int, int]:
    """A vector loop of ``n`` iterations: (iterations in whole vectors, scalar remainder)."""
    return n // LANES * LANES, n % LANES


def _ints(node: ir.Node, name: str, default: list[int]) -> list[int]:
    a = node.attributes.get(name)
    return list(a.as_ints()) if a is not None else default


def conv_work(node: ir.Node, dw: bool = False) -> Work | None:
    """A Conv's work as ``emit_conv8`` loops on its plan (opfuse/kernelplan/conv8.py; module
    docstring); ``dw``: a depthwise conv runs the ISA's vectors of pixels where they apply
    (``x86_depthwise_work``); None when shapes are unknown."""
    xs, ws, ys = static_dims(node.inputs[0]), static_dims(node.inputs[1]), static_dims(node.outputs[0])
    if xs is None or ws is None or ys is None or len(ys) not in (3, 4):
        return None
    rank = len(ys)
    pads = _ints(node, "pads", [0] * (2 * (rank - 2)))
    strides, dilations = _ints(node, "strides", [1] * (rank - 2)), _ints(node, "dilations", [1] * (rank - 2))
    if rank == 3:
        xs, ws, ys = [*xs[:2], 1, xs[2]], [*ws[:2], 1, ws[2]], [*ys[:2], 1, ys[2]]
        pads, strides, dilations = [0, pads[0], 0, pads[1]], [1, *strides], [1, *dilations]
    n, oc, oh, ow = ys
    icg, kh, kw = ws[1], ws[2], ws[3]
    a = node.attributes.get("group")
    group = max(a.as_int() if a is not None else 1, 1)
    ocg, taps, pixels = oc // group, kh * kw, oh * ow
    g = ConvGeom(n, xs[1], xs[2], xs[3], oc, oh, ow, group, (kh, kw), tuple(strides[:2]),
                 tuple(dilations[:2]), tuple(pads[:2]))
    conv = Conv8(g, tuple(pads[2:4]), node.inputs[0].dtype == ir.DataType.INT8, rank)
    plan = plan_conv8(conv)
    if plan.path == "conv_lanes":
        # channel tiles of plan.tile columns x plan.ocb channels (a row, or a pointwise plane
        # read as one row): per tile, input channel and tap, a vector over the block's channels
        # for each column; a loop started per tile, input channel and tap
        rows, columns = (1, pixels) if conv.pointwise else (oh, ow)
        loops = n * group * (ocg // plan.ocb) * rows * -(-columns // plan.tile) * icg * taps
        vec, tail = _split(plan.ocb)
        per = n * oc // plan.ocb * pixels * icg * taps  # block x column x input channel x tap
        return Work(per * vec, n * oc * pixels, loops, "conv_lanes", per * tail)
    if plan.path == "depthwise" and dw and uses_dw_vectors(g):
        return x86_depthwise_work(g)
    if plan.path == "depthwise":
        # SIMD pairs of pixels per row (lane MACs), the columns left one by one (tail MACs);
        # a loop per output row
        rows = n * oc * oh
        return Work(rows * plan.dw_columns * taps, n * oc * pixels, rows, "depthwise",
                    rows * (ow - plan.dw_columns) * taps)
    ocb = plan.ocb
    blocks = n * group * (ocg // ocb)
    if plan.path == "pointwise":  # pixel tiles, each a vector loop over its pixels
        tile = plan.tile
        full, rest = divmod(pixels, tile)
        (tv, tt), (rv, rt) = _split(tile), _split(rest)
        per = blocks * ocb * icg
        return Work(per * (full * tv + rv), n * oc * pixels,
                    blocks * (full + (1 if rest else 0)) * icg, "pointwise", per * (full * tt + rt))
    # one output row at a time, a vector loop over the row per tap (a depthwise conv with a
    # multiplier, dilation or uint8 activations too)
    loops = blocks * oh * icg * taps
    vec, tail = _split(ow)
    return Work(loops * ocb * vec, n * oc * pixels, loops, "conv_rows", loops * ocb * tail)


def x86_depthwise_work(g: ConvGeom) -> Work:
    """A depthwise conv as x86/depthwise*.py runs it (kernelplan/dw8.dw_count): per channel, its
    vectors of 16 output pixels, in each a ``vpdpbusd`` per quad of taps of a tap row inside
    the input (``lane_macs``: 16 lanes x 4 bytes each, padded lanes and taps included); a
    requantization and a masked store per vector (``loops``); ``outputs`` the output elements."""
    c = dw_count(g)
    channels = g.n * g.oc
    return Work(float(channels * c.dots * 64), channels * g.oh * g.ow, channels * c.vectors,
                "depthwise_zmm")


def gemm_work(node: ir.Node, gemv: bool = False) -> Work | None:
    """Gemm/MatMul as ``emit_gemm8``: per output, one dot product over K (vectorized); with
    ``gemv`` (the ISA writes the GEMV and no epilogue but a clamp follows), one row of constant
    weights as ``gemv_work``."""
    a, y = static_dims(node.inputs[0]), static_dims(node.outputs[0])
    if a is None or y is None or not y:
        return None
    k = a[-1]
    outputs = math.prod(y)
    if gemv and uses_gemv8(math.prod(a[:-1])) and const(node.inputs[1]) is not None:
        return gemv_work(y[-1], k)
    vec, tail = _split(k)
    return Work(outputs * vec, outputs, outputs, "gemm", outputs * tail)


def gemv_work(n: int, k: int) -> Work:
    """A batch-1 fully connected layer as x86/gemv.py runs it (kernelplan/conv8.gemv_blocks): per
    block of channel vectors and 4-byte step of K, one broadcast of the row's 4 bytes (a loop)
    and a vpdpbusd per vector (``GEMV_LANES`` x 4 lane MACs, padded channels included); a
    requantization per output."""
    plan = gemv_blocks(n, k)
    return Work(-(-n // GEMV_LANES) * GEMV_LANES * plan.k4 * 4, n, len(plan.blocks) * plan.k4,
                "gemv")


def node_work(node: ir.Node, path: str | None = None, gemv: bool = False,
              dw: bool = False) -> Work:
    """One node's work (module docstring); an unanchored node's path is ``path``, else its class;
    ``gemv``: a batch-1 Gemm/MatMul runs the GEMV (gemm_work); ``dw``: a depthwise conv the
    ISA's vectors of pixels (conv_work)."""
    found = None
    if node.op_type == "Conv":
        found = conv_work(node, dw)
    elif node.op_type in ops.groups.MATRIX:
        found = gemm_work(node, gemv)
    if found is not None:
        return found
    out = static_dims(node.outputs[0]) if node.outputs else None
    outputs = math.prod(out) if out is not None else 0
    loops, macs = 0, float(ops.flops(node))
    if node.op_type in CONVERSIONS and path is None:  # a conversion per element: no MACs
        macs = 0.0
        if node.op_type == "QuantizeLinear" and node.inputs[0].dtype == ir.DataType.FLOAT:
            path = "quantize"  # a division and a rounding per element: twice a dequantize
    if node.op_type == "Softmax" and path is None:  # int8/softmax.py: exp table, sum, reciprocal
        path = "other"
        loops = outputs // out[-1] if out else 0  # a reciprocal per row
    if node.op_type in ops.groups.POOLS and path is None and out is not None:
        found = pool_work(node, out)
        if found is not None:
            return found
    return Work(macs, outputs, loops, path or node_class(node))


def _trips(size: int, out: int, k: int, s: int, d: int, p: int) -> int:
    """Window taps inside an input axis of ``size``, summed over its ``out`` outputs."""
    return sum(1 for o in range(out) for t in range(k) if 0 <= o * s - p + t * d < size)


def pool_work(node: ir.Node, out: list[int]) -> Work | None:
    """An int8 MaxPool/AveragePool as int8/pools.emit_pool_value8 loops: per output, a loop over
    the window's rows (``loops``: each tests its row), in each row inside the input a loop over
    the window's columns (``lane_macs``: each tests its column and compares or adds the tap),
    then the output's store (``outputs``), after a division and its rounding for an
    AveragePool: a MaxPool, which has none, runs the ``pool_max`` path."""
    xs = static_dims(node.inputs[0])
    if xs is None or len(xs) not in (3, 4) or len(out) != len(xs):
        return None
    nsp = len(xs) - 2
    ks = _ints(node, "kernel_shape", [1] * nsp)
    ss, ds = _ints(node, "strides", [1] * nsp), _ints(node, "dilations", [1] * nsp)
    pads = _ints(node, "pads", [0] * (2 * nsp))
    if nsp == 1:  # a 1-D pool is one row
        xs, out = [*xs[:2], 1, xs[2]], [*out[:2], 1, out[2]]
        ks, ss, ds, pads = [1, *ks], [1, *ss], [1, *ds], [0, pads[0], 0, pads[1]]
    planes, (oh, ow) = xs[0] * xs[1], out[2:]
    rows = _trips(xs[2], oh, ks[0], ss[0], ds[0], pads[0])  # rows inside, summed over oh
    outputs = planes * oh * ow
    return Work(float(planes * rows * ow * ks[1]), outputs, outputs * ks[0],
                "pool_max" if node.op_type == "MaxPool" else "pool")


CONVERSIONS = ops.groups.CONVERSIONS
CLAMPS = ops.groups.CLAMPS  # folded into the requantization's clamp: no extra cost


def kernel_work(members: list[ir.Node], gemv: bool = False, dw: bool = False) -> list[Work]:
    """A kernel's work, one item per loop it runs: its anchor's and one ``epilogue`` item per
    fused op after it that is not a clamp (or a view); a prologue before it (a stem's Transpose,
    read in place) none; without an anchor, one per member (an unanchored
    chain of elementwise ops runs one loop per member) but a clamp after a first op that is none
    (the int8 chain folds it into that op's requantization clamp). ``gemv``: the ISA writes the
    GEMV (kernelplan/conv8.has_gemv8), which a batch-1 fully connected anchor with no epilogue
    but clamps runs (x86/conv.emit_gemm_x86; under TFLite's rounding, as the probe's); ``dw``:
    the ISA writes depthwise convs in vectors of pixels (kernelplan/dw8.has_dw8, TFLite's
    rounding), which the anchor runs whatever follows it (x86/depthwise.py)."""
    anchor = next((n for n in members if ops.is_anchor(n)), None)
    if anchor is None:  # a clamp after another op is that op's requantization clamp (Add + Relu)
        return [node_work(n) for i, n in enumerate(members) if not is_view([n])
                and not (i > 0 and n.op_type in CLAMPS and members[0].op_type not in CLAMPS)]
    # a member before the anchor is a prologue it reads in place (fusion/views.py: a stem's
    # Transpose, NHWC rows addressed by the conv's staging or line buffer): no loop of its own
    after = members[members.index(anchor) + 1:]
    rest = [n for n in after if n.op_type not in CLAMPS and not is_view([n])]
    return [node_work(anchor, gemv=gemv and not rest, dw=dw),
            *(node_work(n, "epilogue") for n in rest)]


VIEWS = ops.groups.VIEWS


def is_view(members: list[ir.Node]) -> bool:
    """A kernel of views only: the C's memory plan puts its output on its input, no code runs."""
    return bool(members) and all(n.op_type in VIEWS for n in members)
