"""A Transpose read as a strided view by the MatMul or Conv that consumes it (docs/architecture.md,
"Transformer ops in C" and "Layout of TFLite models").

``MatMul(Transpose(X, perm), B)``: element ``T[i]`` of the transposed tensor is ``X[perm^-1(i)]``,
so a kernel that reads its operand through strides (``stride_T[d] = stride_X[perm[d]]``) reads X
in place and T is never written: the Transpose joins the MatMul's kernel as its first member (a
prologue), and the kernel is then an anchor kernel like any other (epilogues may follow). This
is the one exception to ``layout_change``: any other data movement still runs as its own kernel.

It applies where the edge is otherwise plain: T is read by this MatMul alone and is no graph
output, shapes are static, values float32 and unquantized (an int8 MatMul reads contiguous
rows), the MatMul reads T as exactly one of its operands, and the backend's ``KernelSupport``
says it writes such a kernel (the C takes a right operand whose n dim is strided, attention's
``K^T``, and leaves the others materialized, which it measured faster:
``backends/c/support.py``, ``benchmarks/matmul_views.py``).

A TFLite model's graph input is NHWC and the IR NCHW, so the frontend puts a Transpose
(perm 0,3,1,2) between the input and its first Conv. That Transpose joins the Conv's kernel the
same way (``reads_as_layout``): the conv reads the input in place with NHWC row addressing
(pixels C elements apart, channels 1: ``backends/c/rowsource.py``), so neither the Transpose's
kernel nor its full-size copy exists, in the plan analyze reports or in the C. It applies to a
graph input (or what a QuantizeLinear and a Pad made of one in its NHWC layout: the TFLite
frontend quantizes a float input in NHWC) read by this Conv alone as its data input, float32 or int8 (an int8 Transpose moves
bytes: input and output keep one quantization), where the backend's ``KernelSupport`` says the
conv's path reads NHWC (the C: the float stem's pixel rows, the Cortex-M int8 matrix core,
x86's int8 conv staging); a
kernel that starts with it may be a cascade's first member where the backend's member path reads
NHWC rows (``KernelSupport.why_not_stream``; ``stages.py`` streams the view's NCHW rows, the
Transpose being the conv's addressing, not a stage), else it runs layer by layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from opfuse.fusion.rules import ANCHOR, Group
from opfuse.fusion.support import KernelSupport
from opfuse.quant import get_quant


def _static(value: ir.Value | None) -> bool:
    return (value is not None and value.shape is not None
            and all(isinstance(d, int) for d in value.shape))


def reads_as_view(p: ir.Node, v: ir.Node, x: ir.Value, group: Group,
                  support: KernelSupport) -> bool:
    """Whether MatMul ``v`` may take the Transpose ``p`` (its kernel ``group``, alone) as a
    strided view of p's input (the module doc lists the conditions)."""
    if p.op_type != "Transpose" or v.op_type != "MatMul" or group.nodes != [p]:
        return False
    if p.domain not in ("", "ai.onnx") or v.domain not in ("", "ai.onnx"):
        return False
    if x.is_graph_output() or any(r is not v for r in x.consumers()):
        return False
    if sum(1 for value in v.inputs if value is x) != 1:
        return False
    src, out = p.inputs[0], v.outputs[0]
    for value in (src, x, out):
        if not _static(value) or value.dtype != ir.DataType.FLOAT or get_quant(value) is not None:
            return False
    return support.why_not_kernel([p, v]) is None


NHWC_TO_NCHW = (0, 3, 1, 2)


def nhwc_view(members: Sequence[ir.Node]) -> ir.Node | None:
    """The Transpose a kernel of ``members`` starts with when it is a graph input's NHWC -> NCHW
    view read in place by the Conv after it (``reads_as_layout`` joined them), else None."""
    if len(members) < 2:
        return None
    p, v = members[0], members[1]
    if p.op_type != "Transpose" or v.op_type != "Conv" or not p.outputs or not v.inputs:
        return None
    perm = p.attributes["perm"].value if "perm" in p.attributes else None
    if perm is None or tuple(perm) != NHWC_TO_NCHW or v.inputs[0] is not p.outputs[0]:
        return None
    return p


def layout_members(nodes: Sequence[ir.Node]) -> int:
    """1 when a kernel starts with a graph input's NHWC view: it is the conv's addressing, not an
    op of the chain, so it does not count towards ``max_chain``."""
    return int(nhwc_view(nodes) is not None)


def _boundary(value: ir.Value) -> bool:
    """A graph input, or what layout-indifferent ops made of one in its NHWC layout (a float
    input's QuantizeLinear, then a Pad: mcunet_vww), so the Transpose is the boundary's."""
    while not value.is_graph_input():
        p = value.producer()
        if p is None or p.op_type not in _NHWC_OPS or p.domain not in ("", "ai.onnx") \
                or p.inputs[0] is None:
            return False
        value = p.inputs[0]
    return True


_NHWC_OPS = ("QuantizeLinear", "Pad")


def reads_as_layout(p: ir.Node, v: ir.Node, x: ir.Value, group: Group,
                    support: KernelSupport) -> bool:
    """Whether Conv ``v`` may read the graph input's NHWC -> NCHW Transpose ``p`` (its kernel
    ``group``, alone) in place (the module doc lists the conditions)."""
    if group.nodes != [p] or nhwc_view([p, v]) is None:
        return False
    if p.domain not in ("", "ai.onnx") or v.domain not in ("", "ai.onnx"):
        return False
    src = p.inputs[0]
    if src is None or not _boundary(src) or x.is_graph_output():
        return False
    if any(r is not v for r in x.consumers()) or any(value is x for value in v.inputs[1:]):
        return False
    if not all(_static(value) and len(value.shape) == 4 for value in (src, x, v.outputs[0])):
        return False
    if src.dtype != x.dtype or src.dtype not in (ir.DataType.FLOAT, ir.DataType.INT8):
        return False
    if get_quant(src) != get_quant(x):
        return False
    return support.why_not_kernel([p, v]) is None


def join_as_anchor(group: Group, v: ir.Node) -> None:
    """The Transpose's kernel becomes the MatMul's or Conv's: an anchor kernel that starts with a
    view."""
    if len(group.nodes) == 2 and group.nodes[0].op_type == "Transpose" and group.nodes[1] is v:
        group.head = v
        group.stage = ANCHOR
