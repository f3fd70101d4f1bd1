"""The work of one float kernel as opfuse's generated float C does it, for a target with
``[perf.floatc]`` (the Cortex-M targets; ``opfuse.cost.floatc``; docs/architecture.md, the cost
row). It reads the float conv plan the emitter reads (``opfuse.kernelplan.convf.plan_convf``), so
a conv is priced on the loop nest that runs it:

- ``lane_macs``: its multiply-adds (every conv path sums the whole reduction; a scalar FPU has no
  vector tail to split off, so ``tail_macs`` stays 0);
- ``outputs``: output elements (bias, the fused epilogue's first step, the store);
- ``loops``: the set-up that does not scale with the MACs, as the path loops:
  ``depthwise`` a band row per output row and channel (dwconv.py); ``pixels`` a tile per output
  pixel and ``lanes`` output channels, times the input channels when its taps are not all
  unrolled (pixeltiles.py); ``direct`` and ``vector`` (convdirect.py's register tiles: a
  member's, and conv.py's direct conv on a scalar FPU) a loop per output row, block of output
  channels (``convf.oc_blocks``), input channel and kernel row; ``columns`` / ``channels`` (a
  vector unit's cascade tiles) a tile per output row and ``lanes`` channels, times its input
  channels. The direct core sums a last block's zero-padded channels too: its MACs count them;
  so do the pixel tiles' when a group has more than one block (with one, the padded sums are
  never stored, ``if (ob < 0)``, and gcc drops them: a classifier's 2 channels on a 1x1 plane
  run as many instructions as its real MACs predict).

Kernels without a conv anchor: a Gemm's dot product over K per output (``gemm``); a windowed
pool's window elements, outputs and a loop over the output row per row and tap (pools.py,
``pool``; a pool whose output rows are one value wide, a classifier's whole-plane average,
runs every tap's loop as one unrolled step, several times cheaper per element: ``pool_taps``); a global pool's elements and a loop per channel (``reduce``); the rest as the int8
work counts them (``opfuse.cost.cwork.node_work``: FLOPs and outputs on their class's path); every fused op after an anchor, a clamp too (float has no requantization to fold it
into), costs its outputs on the ``epilogue`` path (no MACs), and so does an elementwise op
after the first op of a kernel without an anchor (the Relu of an Add + Relu: one loop). A cascade's member convs take the plan of a
member (``member=True``), as cascade.py asks for it. A depthwise conv that copies its input rows
into a zero-padded band (layer by layer, or a member at stride 2 or on a vector unit: the plan's
``in_place``; not where the ISA writes its rows in vectors read in place, the plan's ``vectors``:
``convf.depthwise_vectors`` of the ISA's ``depthwise_rows`` and the fused epilogue), and a pixel-tile conv that copies its KH input rows into a line buffer per output
row (any but a 1x1 stride-1 unpadded one), add the floats copied on the ``band`` and ``line``
paths. A ConvTranspose is priced on convt.py's sub-pixel phases (``kernelplan.convt``): its
column tiles' multiply-adds on the ``columns`` path (their zero-padded lanes and the computed
columns of a short phase row included), a loop per phase row, block of lanes and input channel,
and its line buffer's floats on the ``line`` path.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse import ops
from opfuse.cost.cwork import Work, is_view, node_work
from opfuse.cost.kclass import node_class
from opfuse.ir.values import clamp_bounds, static_dims
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.kernelplan.convf import line_floats, oc_blocks, plan_convf
from opfuse.kernelplan.convt import plan_convt, transpose_geom, transpose_work

__all__ = ["conv_geom", "float_conv_work", "float_kernel_work"]


def _ints(node: ir.Node, name: str, default: list[int]) -> list[int]:
    a = node.attributes.get(name)
    return list(a.as_ints()) if a is not None else default


def conv_geom(node: ir.Node) -> ConvGeom | None:
    """A 1-D or 2-D Conv's geometry (1-D as a height of 1); None when shapes are unknown."""
    xs, ws, ys = (static_dims(node.inputs[0]), static_dims(node.inputs[1]),
                  static_dims(node.outputs[0]))
    if xs is None or ws is None or ys is None or len(ys) not in (3, 4):
        return None
    rank = len(ys)
    pads = _ints(node, "pads", [0] * (2 * (rank - 2)))
    strides = _ints(node, "strides", [1] * (rank - 2))
    dilations = _ints(node, "dilations", [1] * (rank - 2))
    if rank == 3:
        xs, ws, ys = [*xs[:2], 1, xs[2]], [*ws[:2], 1, ws[2]], [*ys[:2], 1, ys[2]]
        pads, strides, dilations = [0, pads[0], 0, pads[1]], [1, *strides], [1, *dilations]
    a = node.attributes.get("group")
    group = max(a.as_int() if a is not None else 1, 1)
    return ConvGeom(ys[0], xs[1], xs[2], xs[3], ys[1], ys[2], ys[3], group, (ws[2], ws[3]),
                    (strides[0], strides[1]), (dilations[0], dilations[1]), (pads[0], pads[1]))


def float_conv_work(node: ir.Node, scalar: bool, member: bool = False, rows: bool = False,
                    epilogue: list[ir.Node] | None = None) -> list[Work] | None:
    """A float Conv's work on its ``plan_convf`` path (module docstring), and a depthwise conv's
    band copy; None: shapes unknown or weights not constant (no plan of convf.py runs it).
    ``rows``: the ISA's depthwise rows in vectors (``Isa.depthwise_rows``), taken as the plan
    says for the fused ``epilogue`` (``convf.depthwise_vectors``)."""
    g = conv_geom(node)
    if g is None or node.inputs[1].const_value is None:
        return None
    plan = plan_convf(g, scalar, member, rows=rows, clamps=clamp_bounds(epilogue or []) is not None)
    taps = g.k[0] * g.k[1]
    pixels = g.oh * g.ow
    macs = g.n * g.oc * pixels * g.icg * taps
    outputs = g.n * g.oc * pixels
    if plan.path == "depthwise":
        loops = g.n * g.oc * g.oh
        if not (plan.in_place or plan.vectors):  # each channel's rows copied into a padded band
            band = ((g.oh - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1) * \
                ((g.ow - 1) * g.s[1] + (g.k[1] - 1) * g.d[1] + 1)
            return [Work(float(macs), outputs, loops, "depthwise"),
                    Work(0.0, g.n * g.c * band, 0, "band")]
    elif plan.path == "pixels":
        blocks = g.n * g.group * math.ceil(g.ocg / plan.lanes)
        if g.ocg > plan.lanes:  # the last block's padded sums: see the module docstring
            macs = blocks * plan.lanes * pixels * g.icg * taps
        loops = blocks * pixels * (1 if plan.unrolled else g.icg)
        if line_floats(g):  # the line buffer: the KH input rows copied once per output row
            return [Work(float(macs), outputs, loops, "pixels"),
                    Work(0.0, g.n * g.oh * line_floats(g), 0, "line")]
    elif plan.path in ("columns", "channels"):
        loops = g.n * g.group * math.ceil(g.ocg / plan.lanes) * g.oh * g.icg
    else:  # direct / vector: convdirect.py's register tiles, blocks padded to DIRECT_LANES
        blocks = oc_blocks(g.ocg)
        macs = g.n * g.group * sum(b[2] for b in blocks) * pixels * g.icg * taps
        loops = g.n * g.group * len(blocks) * g.oh * g.icg * g.k[0]
    return [Work(float(macs), outputs, loops, plan.path)]


def convt_work(node: ir.Node) -> list[Work] | None:
    """A float ConvTranspose's work as convt.py's phases run it (``kernelplan.convt``): its
    column tiles, and the floats its line buffer copies; None: shapes unknown."""
    xs, ws, ys = (static_dims(node.inputs[0]), static_dims(node.inputs[1]),
                  static_dims(node.outputs[0]))
    if xs is None or ws is None or ys is None or len(ys) not in (3, 4):
        return None
    nsp = len(ys) - 2
    pads = node.attributes.get("pads")
    out_pad = node.attributes.get("output_padding")
    auto = node.attributes.get("auto_pad")
    a = node.attributes.get("group")
    g = transpose_geom(list(xs), list(ys), _ints(node, "kernel_shape", list(ws[2:])),
                       _ints(node, "strides", [1] * nsp), _ints(node, "dilations", [1] * nsp),
                       list(pads.as_ints()) if pads is not None else None,
                       node.attributes.get("output_shape") is not None,
                       list(out_pad.as_ints()) if out_pad is not None else None,
                       auto.as_string() if auto is not None else "NOTSET",
                       max(a.as_int() if a is not None else 1, 1))
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    plan = plan_convt(g, bias is None or bias.const_value is not None,
                      node.inputs[1].const_value is not None)
    done = transpose_work(g, plan)
    work = [Work(float(done.macs), done.outputs, done.loops, "columns")]
    return work + ([Work(0.0, done.line, 0, "line")] if done.line else [])


def _node_work(node: ir.Node, scalar: bool, member: bool, path: str | None = None,
               rows: bool = False, epilogue: list[ir.Node] | None = None) -> list[Work]:
    if node.op_type == "ConvTranspose" and path is None:
        found = convt_work(node)
        if found is not None:
            return found
        out = static_dims(node.outputs[0])  # unknown shapes: its MACs at the vector rates
        return [Work(float(ops.macs(node)), math.prod(out) if out else 0, 0, "vector")]
    if node.op_type == "Conv" and path is None:
        found = float_conv_work(node, scalar, member, rows, epilogue)
        if found is not None:
            return found
        out = static_dims(node.outputs[0])  # no plan: computed weights or unknown shapes
        return [Work(float(ops.macs(node)), math.prod(out) if out else 0, 0, "vector")]
    return [_other_work(node, path)]


def _other_work(node: ir.Node, path: str | None) -> Work:
    if node.op_type in ops.groups.MATRIX and path is None:  # a dot product over K per output
        a, y = static_dims(node.inputs[0]), static_dims(node.outputs[0])
        if a and y:
            return Work(float(math.prod(y) * a[-1]), math.prod(y), math.prod(y), "gemm")
    if node.op_type in WINDOWED_POOLS and path is None:
        # pools.py: per output row of a channel, a loop over the row per window tap
        x, y = static_dims(node.inputs[0]), static_dims(node.outputs[0])
        if x and y and len(y) == 4:
            kh, kw = _ints(node, "kernel_shape", [1, 1])
            rows, taps = y[0] * y[1] * y[2], math.prod(y) * kh * kw
            if y[3] == 1:  # one value a row: every tap's loop a single step, unrolled by gcc
                return Work(float(taps), math.prod(y), 0, "pool_taps")
            return Work(float(taps), math.prod(y), rows * kh * kw, "pool")
    if node.op_type in GLOBAL_POOLS and path is None:  # pools.emit_global: a loop per channel
        x = static_dims(node.inputs[0])
        if x and len(x) >= 3:
            return Work(float(math.prod(x)), x[0] * x[1], x[0] * x[1], "reduce")
    return node_work(node, path)

WINDOWED_POOLS = ops.groups.POOLS
GLOBAL_POOLS = ops.groups.GLOBAL_POOLS


def float_kernel_work(members: list[ir.Node], scalar: bool, member: bool = False,
                      rows: bool = False) -> list[Work]:
    """A float kernel's work (module docstring), one item per loop it runs; ``member``: the
    nodes are one member of a cascade; ``rows``: the ISA writes depthwise rows in vectors
    (``Isa.depthwise_rows``)."""
    anchor = next((n for n in members if ops.is_anchor(n)), None)
    if anchor is None:  # elementwise ops after the first run in its loop (an Add's Relu)
        run = [n for n in members if not is_view([n])]
        return [w for i, n in enumerate(run) for w in (
            [Work(0.0, _other_work(n, "epilogue").outputs, 0, "epilogue")]
            if i > 0 and node_class(n) == "elementwise" else _node_work(n, scalar, member))]
    rest = [n for n in members if n is not anchor and not is_view([n])]
    return [*_node_work(anchor, scalar, member, rows=rows, epilogue=rest),
            *(Work(0.0, _other_work(n, "epilogue").outputs, 0, "epilogue") for n in rest)]
