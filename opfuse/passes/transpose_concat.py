"""Move Transposes past a Concat, remapping its axis.

    Concat(Transpose(a, p), Transpose(b, p), axis=k) = Transpose(Concat(a, b, axis=p[k]), p)

Joining along axis ``k`` of the transposed tensors is joining along axis ``p[k]`` of the sources.
Other operands are accepted as in ``transpose_elementwise``: constants are permuted (a Concat's
constant has the full rank), an operand whose inverse Transpose is already in the graph reads it.
A negative axis is taken modulo the rank first.
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.passes._driver import RulePass
from opfuse.passes._layout import LayoutRule
from opfuse.passes._push import move_past, plan_operands, worth_moving


class PushTransposeConcat(LayoutRule):
    name = "PushTransposeConcat"

    def rewrite(self, graph, node):
        ops = plan_operands(node)
        if ops is None or not worth_moving(node, ops):
            return None
        if any(v is not None and v.const_value is not None and v.const_value.numpy().ndim != len(ops.perm)
               for v in node.inputs):
            return None  # a Concat operand never broadcasts: it must have the full rank
        axis = node.attributes.get_int("axis", 0) % len(ops.perm)
        return move_past(node, ops, axis=ir.AttrInt64("axis", ops.perm[axis]))


def concat_push_pass() -> RulePass:
    return RulePass("push_transpose_concat", ("Concat",), (PushTransposeConcat(),))
