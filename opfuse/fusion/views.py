"""A Transpose read as a strided view by the MatMul that consumes it (docs/architecture.md,
"Transformer ops in C").

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
"""

from __future__ import annotations

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


def join_as_anchor(group: Group, v: ir.Node) -> None:
    """The Transpose's kernel becomes the MatMul's: an anchor kernel that starts with a view."""
    if len(group.nodes) == 2 and group.nodes[0].op_type == "Transpose" and group.nodes[1] is v:
        group.head = v
        group.stage = ANCHOR
