"""Window attributes (strides, dilations, pads, kernel sizes, group) checked against the tensor
shapes at import (docs/architecture.md, "Outputs and limits"). ONNX shape inference accepts a
stride of 2^63-1; the C emitter then loops over it. Each rule is a small named check whose message
names the node; every value is also bounded by the ``extent`` limit (opfuse/frontends/limits.py).

For a spatial axis of input size ``n``, pads ``b`` and ``e`` and kernel extent
``(k - 1) * d + 1``: ``stride >= 1``, ``dilation >= 1``, ``0 <= pad``,
``kernel extent <= n + b + e`` (the ONNX operator spec's output size,
``floor((n + b + e - extent) / stride) + 1``, is then >= 1; a pool with ``ceil_mode`` rounds up,
so its one window may overhang the input by up to ``stride - 1``: EfficientNet's pooler in
``transformers`` is ``AvgPool2d(1280, ceil_mode=True)`` on a 7x7 map), and for Conv ``group`` divides the
input channels and the filters, with ``weight.shape[1] * group`` the input channels. A stride
larger than the padded input is valid ONNX (the output is one element along that axis: ResNet's
1x1 stride-2 shortcut on a 1x1 map, with a small ``--input-shape``), so only the extent limit
bounds it.
"""

from __future__ import annotations

import onnx

from opfuse.errors import OpfuseError
from opfuse.frontends.limits import current_limits
from opfuse.frontends.size_check import value_shapes

_CONVS = ("Conv", "ConvInteger", "ConvTranspose")
_POOLS = ("MaxPool", "AveragePool", "LpPool")


def _ints(node: onnx.NodeProto, name: str) -> list[int] | None:
    for attr in node.attribute:
        if attr.name == name:
            return list(attr.ints) if attr.ints else ([attr.i] if attr.HasField("i") else [])
    return None


def _bounded(at: str, name: str, values: list[int], low: int) -> None:
    extent = current_limits().extent
    for v in values:
        if v < low:
            raise OpfuseError(f"{at}: {name} {values} must be >= {low}")
        if v > extent:
            raise OpfuseError(f"{at}: {name} {values} is over the extent limit of {extent} "
                              "(raise it with --limit extent=N)")


def _check_axes(at: str, spatial: tuple[int, ...], kernel: list[int], node: onnx.NodeProto,
                transposed: bool) -> None:
    rank = len(kernel)
    strides = _ints(node, "strides") or [1] * rank
    dilations = _ints(node, "dilations") or [1] * rank
    pads = _ints(node, "pads") or [0] * (2 * rank)
    for name, values, low in (("strides", strides, 1), ("dilations", dilations, 1),
                              ("pads", pads, 0), ("kernel_shape", kernel, 1)):
        _bounded(at, name, values, low)
    if transposed or len(spatial) != rank or len(strides) != rank or len(pads) != 2 * rank:
        return  # a transposed window grows its input; inference and the extent bound suffice
    auto = next((a.s.decode() for a in node.attribute if a.name == "auto_pad"), "NOTSET")
    ceil = (_ints(node, "ceil_mode") or [0])[0] == 1
    for axis, n in enumerate(spatial):
        padded = n + (pads[axis] + pads[axis + rank] if auto in ("NOTSET", "VALID") else 0)
        extent = (kernel[axis] - 1) * dilations[axis] + 1
        if auto.startswith("SAME"):
            continue
        if extent > padded and not (ceil and extent < padded + strides[axis]):
            raise OpfuseError(f"{at}: kernel extent {extent} on spatial axis {axis} is larger "
                              f"than the padded input ({padded})")


def _check_group(at: str, node: onnx.NodeProto, x: tuple[int, ...], w: tuple[int, ...]) -> None:
    group = (_ints(node, "group") or [1])[0]
    if group < 1:
        raise OpfuseError(f"{at}: group {group} must be >= 1")
    if node.op_type == "ConvTranspose" or len(x) < 2 or len(w) < 2:
        return
    if x[1] % group or w[0] % group or w[1] * group != x[1]:
        raise OpfuseError(f"{at}: group {group} does not fit {x[1]} input channels and weight "
                          f"{list(w)}")


def check_windows(proto: onnx.ModelProto, where: str,
                  values: dict[str, tuple[tuple[int, ...], int]] | None = None) -> None:
    """Every Conv and pool of the top graph, against ``values`` (``value_shapes`` of the inferred
    graph; computed here when not given) and the weights."""
    graph = proto.graph
    windows = [(i, n) for i, n in enumerate(graph.node)
               if n.domain in ("", "ai.onnx") and n.op_type in (*_CONVS, *_POOLS)]
    if not windows:
        return
    if values is None:
        values = value_shapes(graph)
    shapes = {name: dims for name, (dims, _) in values.items()}
    weights = {n.input[1] for _, n in windows if len(n.input) > 1}
    shapes.update({t.name: tuple(t.dims) for t in graph.initializer if t.name in weights})
    for index, node in windows:
        at = f"{where}: node '{node.name or node.op_type + ' #' + str(index)}' ({node.op_type})"
        x = shapes.get(node.input[0]) if node.input else None
        w = shapes.get(node.input[1]) if node.op_type in _CONVS and len(node.input) > 1 else None
        kernel = _ints(node, "kernel_shape") or (list(w[2:]) if w is not None else None)
        if kernel is None:
            continue
        spatial = x[2:] if x is not None else ()
        _check_axes(at, spatial, kernel, node, node.op_type == "ConvTranspose")
        if node.op_type in _CONVS:
            _check_group(at, node, x or (), w or ())
