"""Which kernels may stream rows inside a cascade, and the window each reads (height axis).

A kernel of the layer-by-layer partition is a *stage* of a cascade when every member streams rows
of NCHW tensors with batch 1: a 2-D Conv, MaxPool or AveragePool (a window of rows, see
``opfuse/fusion/rings.py``), or an elementwise / broadcast op whose other operands are constants,
per-channel tensors, or (with ``cascade_residual``) a second full activation read row by row from
the arena. Anything that needs its whole input (global pools, reductions, reshapes, matrix
products) or that the row scheduler does not stream yet (Concat, Resize, ConvTranspose, Pad...)
ends a cascade with ``cascade_global_op``.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from opfuse.fusion.rings import Window
from opfuse.fusion.rules import Refusal, is_constant
from opfuse.fusion.views import nhwc_view
from opfuse.ir.values import static_dims
from opfuse.ops import OpKind, groups, kind
from opfuse.schedule import Kernel
from opfuse.targets import Target

WINDOWED = groups.WINDOWED


@dataclass(frozen=True)
class Stage:
    window: Window  # rows of the stage's first input read per output row (composed over members)
    anchors: int  # anchors among its nodes (Conv)
    sides: tuple[str, ...]  # full activations its elementwise ops read row by row (a residual)


def rows_of(value: ir.Value | None) -> int | None:
    """Height of an NCHW, batch-1 tensor with static dims; None for anything else."""
    d = static_dims(value)
    return d[2] if d is not None and len(d) == 4 and d[0] == 1 else None


def stage_of(kernel: Kernel, nodes: dict[str, ir.Node], target: Target) -> Stage | Refusal:
    """The kernel as a stage of a cascade on ``target``, or why it cannot be one."""
    window = Window()
    anchors = 0
    sides: dict[str, None] = {}
    members = _streamed_nodes([nodes[n] for n in kernel.nodes])
    inside = {id(o) for n in members for o in n.outputs if o is not None}
    for node in members:
        refusal = _global(node, target)
        if refusal is not None:
            return refusal
        if node.op_type in groups.CONVERSIONS:
            # a float <-> int8 conversion is its own kernel (dtype_mismatch): no stream crosses it
            return Refusal(
                "dtype_mismatch", f"{node.op_type} '{node.name}' converts between float and int8"
            )
        for out in node.outputs:
            if out is not None and rows_of(out) is None:
                why = f"its output '{out.name}' is not a static NCHW tensor of batch 1"
                return _refuse(node, target, why)
        if node.op_type in WINDOWED:
            window = window.then(window_of(node))
            anchors += node.op_type == "Conv"
            continue
        out = static_dims(node.outputs[0])
        streamed = [v for v in node.inputs if v is not None and (
            id(v) in inside or (node is members[0] and v is node.inputs[0]))]  # fmt: skip
        if any(static_dims(v) != out for v in streamed):  # e.g. a squeeze-excite scale times a map
            why = "it broadcasts the value it streams to a larger output"
            return _refuse(node, target, why)
        for operand in node.inputs:  # elementwise: what are its other operands?
            if operand is None or id(operand) in inside or is_constant(operand):
                continue
            shape = static_dims(operand)
            if shape is not None and len(shape) == 4 and shape[2] == 1:
                continue  # broadcast along the rows: a per-channel operand
            if shape != out:
                why = f"its operand '{operand.name}' is broadcast across rows"
                return _refuse(node, target, why)
            sides[operand.name] = None
    return Stage(window, anchors, tuple(sides))


def chain_input(kernel: Kernel, nodes: dict[str, ir.Node]) -> ir.Value | None:
    """The value a stage streams in, NCHW: its first streamed node's data input (a conv reading
    an NHWC graph input in place streams the view's rows, views.py)."""
    first = _streamed_nodes([nodes[n] for n in kernel.nodes])[0]
    return first.inputs[0] if first.inputs else None


def _streamed_nodes(members: list[ir.Node]) -> list[ir.Node]:
    """The kernel's nodes that stream rows: all but a leading NHWC view (fusion/views.py), which
    is the first conv's addressing of the cascade's input, not an op of its own."""
    return members[1:] if nhwc_view(members) is not None else members


def _global(node: ir.Node, target: Target) -> Refusal | None:
    if node.op_type in WINDOWED:
        ks = node.attributes.get("kernel_shape")
        data = node.inputs[0] if node.inputs else None
        if rows_of(data) is None or (ks is not None and len(ks.as_ints()) != 2):
            return _refuse(node, target, "it is not a 2-D window over an NCHW tensor of batch 1")
        if node.op_type == "Conv" and not is_constant(node.inputs[1]):
            return _refuse(node, target, "its weights are not constants")
        return None
    if kind(node) in (OpKind.ELEMWISE, OpKind.BROADCAST) and node.domain in ("", "ai.onnx"):
        return None
    return _refuse(node, target, "it needs its whole input or is not streamed by row")


def _refuse(node: ir.Node, target: Target, why: str) -> Refusal:
    return Refusal(
        "cascade_global_op",
        f"{node.op_type} '{node.name}' cannot stream rows in a cascade on {target.name}: {why}",
    )


def _ints(node: ir.Node, name: str, default: list[int]) -> list[int]:
    attr = node.attributes.get(name)
    return list(attr.as_ints()) if attr is not None else default


def window_of(node: ir.Node) -> Window:
    """The height-axis window of a 2-D Conv / MaxPool / AveragePool (auto_pad resolved)."""
    weights = node.inputs[1] if node.op_type == "Conv" else None
    wdims = static_dims(weights)
    default_k = [wdims[2], wdims[3]] if wdims is not None and len(wdims) == 4 else [1, 1]
    k = _ints(node, "kernel_shape", default_k)[0]
    s = _ints(node, "strides", [1, 1])[0]
    d = _ints(node, "dilations", [1, 1])[0]
    pads = _ints(node, "pads", [0, 0, 0, 0])
    top = pads[0]
    auto = node.attributes.get("auto_pad")
    mode = auto.as_string() if auto is not None else "NOTSET"
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        height = rows_of(node.inputs[0]) or 1
        out = -(-height // s)
        total = max((out - 1) * s + d * (k - 1) + 1 - height, 0)
        top = total // 2 if mode == "SAME_UPPER" else total - total // 2
    elif mode == "VALID":
        top = 0
    return Window(kernel=k, stride=s, dilation=d, pad_top=top)
