"""Importers of TFLite's data-movement ops: RESHAPE, SQUEEZE, TRANSPOSE, RESIZE_*, DEPTH_TO_SPACE,
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
