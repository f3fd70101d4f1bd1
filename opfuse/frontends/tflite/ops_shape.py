"""Importers of TFLite's data-movement ops: RESHAPE, SQUEEZE, TRANSPOSE, RESIZE_*, DEPTH_TO_SPACE,
STRIDED_SLICE (computed bounds),
and CUSTOM ops as opaque nodes.

RESHAPE keeps TFLite's element order: its input is read in the identity (NHWC) layout, which
costs a Transpose only when non-unit axes move (docs/architecture.md, "Layout of TFLite models").
A TRANSPOSE emits nothing: its output is its input in another layout.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from opfuse.frontends.tflite import layout as L
from opfuse.frontends.tflite.graph import Graph
from opfuse.frontends.tflite.reader import Operator

CUSTOM_DOMAIN = "tflite.custom"


def reshape(g: Graph, op: Operator) -> None:
    """RESHAPE and SQUEEZE: the output tensor's static shape is the new shape."""
    x, out = op.inputs[0], op.outputs[0]
    shape = g.shape(out)
    name = g.tensor(out).name
    v = g.read(x, L.identity(len(g.shape(x))))
    y = g.node("Reshape", [v, g.ints(shape, f"{name}_shape")], f"{name}_reshape")
    g.write(out, y)


def transpose(g: Graph, op: Operator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    perm = tuple(int(p) for p in np.ravel(g.need_const(op.inputs[1], "perm")))
    lay = g.layout(x)
    moved = L.compose(L.inverse(perm), lay)
    qx, qy = g.quant(x), g.quant(out)
    same = (qx is None) == (qy is None) and (
        qx is None or (np.array_equal(qx.scale, qy.scale)
                       and np.array_equal(qx.zero_point, qy.zero_point))
    )
    if same and g.tensor(x).dtype == g.tensor(out).dtype:
        g.alias(out, g.value(x, lay), moved)
        g.pinned.add(out)
    else:  # a requantizing transpose: DQ -> Q in the new layout
        g.write(out, g.read(x, lay), moved)
        g.pinned.add(out)


def _resize(mode: str):
    def importer(g: Graph, op: Operator) -> None:
        o = op.options
        x, out = op.inputs[0], op.outputs[0]
        align = bool(o.AlignCorners()) if o is not None else False
        half = bool(o.HalfPixelCenters()) if o is not None else False
        attrs = {"mode": mode}
        if mode == "nearest":
            if align:
                attrs.update(coordinate_transformation_mode="align_corners",
                             nearest_mode="round_prefer_ceil")
            elif half:
                attrs.update(coordinate_transformation_mode="tf_half_pixel_for_nn",
                             nearest_mode="floor")
            else:
                attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        else:
            attrs["coordinate_transformation_mode"] = (
                "align_corners" if align else "half_pixel" if half else "asymmetric"
            )
        n, h, w, c = g.shape(out)
        name = g.tensor(out).name
        sizes = g.ints([n, c, h, w], f"{name}_sizes")
        y = g.node("Resize", [g.read(x, L.NCHW), "", "", sizes], f"{name}_resize", **attrs)
        g.write(out, y, L.NCHW)

    return importer


resize_bilinear = _resize("linear")
resize_nearest = _resize("nearest")


def depth_to_space(g: Graph, op: Operator) -> None:
    """TFLite's DEPTH_TO_SPACE reads depth as (row, column, channel): ONNX's DCR mode."""
    x, out = op.inputs[0], op.outputs[0]
    y = g.node("DepthToSpace", [g.read(x, L.NCHW)], f"{g.tensor(out).name}_d2s",
               blocksize=int(op.options.BlockSize()), mode="DCR")
    g.write(out, y, L.NCHW)


def custom(g: Graph, op: Operator) -> None:
    """An opaque node ``tflite.custom.<code>`` on the stored tensors in their own layout; its
    outputs' shapes and dtypes come from the model (value_info), since nothing can infer them."""
    inputs = [g.value(i, L.identity(len(g.shape(i)))) if i >= 0 else "" for i in op.inputs]
    code = op.custom_code or "CUSTOM"
    outs = [g.fresh(g.tensor(o).name) for o in op.outputs]
    attrs = {"custom_options": op.custom_options} if op.custom_options else {}
    g.nodes.append(helper.make_node(code, inputs, outs, name=g.fresh(f"op{op.index}_{code}"),
                                    domain=CUSTOM_DOMAIN, **attrs))
    for o, name in zip(op.outputs, outs, strict=True):
        g.value_info_for(name, o)
        g.alias(o, name, L.identity(len(g.shape(o))))
        g.pinned.add(o)  # what follows works in the custom op's layout


_FIRST, _LAST = np.iinfo(np.int64).min, np.iinfo(np.int64).max  # ONNX Slice clamps these


def strided_slice(g: Graph, op: Operator) -> None:
    """STRIDED_SLICE whose begin / end / strides are not all constants (constant ones fold at
    import, ``fold.py``): an ONNX Slice whose starts, ends and steps are values, on the tensor in
    TFLite's own axis order. The masks are resolved per axis with Where: begin_mask -> the first
    element in the step's direction, end_mask -> past the last, shrink_axis_mask -> end = begin + 1
    (begin -1: to the end), step 1, and a Squeeze of that axis; ``offset`` makes end relative to
    begin. Shapes stay what the file states (dynamic dims unknown): ONNX Slice semantics match
    TFLite's for these (negative indices count from the end, bounds clamp)."""
    o = op.options
    if o is not None and (o.EllipsisMask() or o.NewAxisMask()):
        g.fail("STRIDED_SLICE with ellipsis or new-axis masks is not imported")
    x, out = op.inputs[0], op.outputs[0]
    name = g.tensor(out).name
    rank = int(g.shape(op.inputs[1])[0])  # begin, end and strides: one entry per sliced axis
    masks = {key: [bool(getattr(o, key)() >> a & 1) if o is not None else False
                   for a in range(rank)] for key in ("BeginMask", "EndMask", "ShrinkAxisMask")}

    def vec(index: int, hint: str) -> str:  # an int64 value of begin / end / strides
        return g.node("Cast", [g.value(index)], f"{name}_{hint}", to=7)

    def where(mask: list[bool], yes: str, no: str, hint: str) -> str:
        if not any(mask):
            return no
        cond = g.initializer(np.asarray(mask, np.bool_), f"{name}_{hint}_mask")
        return g.node("Where", [cond, yes, no], f"{name}_{hint}")

    begin, end, steps = vec(op.inputs[1], "begin"), vec(op.inputs[2], "end"), \
        vec(op.inputs[3], "strides")
    if o is not None and hasattr(o, "Offset") and o.Offset():  # older schemas have no offset
        end = g.node("Add", [begin, end], f"{name}_end_offset")
    zero, one = g.ints([0] * rank, f"{name}_zeros"), g.ints([1] * rank, f"{name}_ones")
    forward = g.node("Greater", [steps, zero], f"{name}_forward")
    first = g.node("Where", [forward, zero, g.ints([_LAST] * rank, f"{name}_max")], f"{name}_first")
    past = g.node("Where", [forward, g.ints([_LAST] * rank, f"{name}_max2"),
                            g.ints([_FIRST] * rank, f"{name}_min")], f"{name}_past")
    starts = where(masks["BeginMask"], first, begin, "starts")
    ends = where(masks["EndMask"], past, end, "ends")
    if any(masks["ShrinkAxisMask"]):  # one element: [begin, begin + 1), begin -1 to the end
        nxt = g.node("Add", [begin, one], f"{name}_next")
        nxt = g.node("Where", [g.node("Equal", [nxt, zero], f"{name}_at_end"),
                               g.ints([_LAST] * rank, f"{name}_max3"), nxt], f"{name}_next_end")
        ends = where(masks["ShrinkAxisMask"], nxt, ends, "shrunk_ends")
        steps = where(masks["ShrinkAxisMask"], one, steps, "shrunk_steps")
        starts = where(masks["ShrinkAxisMask"], begin, starts, "shrunk_starts")
    axes = g.ints(list(range(rank)), f"{name}_axes")
    v = g.read(x, L.identity(len(g.shape(x))))
    y = g.node("Slice", [v, starts, ends, axes, steps], f"{name}_slice")
    shrink = [a for a in range(rank) if masks["ShrinkAxisMask"][a]]
    if shrink:
        y = g.node("Squeeze", [y, g.ints(shrink, f"{name}_squeeze")], f"{name}_squeezed")
    g.write(out, y)
