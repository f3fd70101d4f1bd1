"""Move Transposes past an elementwise op with several non-constant operands (a residual Add).

    Add(Transpose(a, p), Transpose(b, p)) = Transpose(Add(a, b), p)
    Add(Transpose(a, p), b)               = Transpose(Add(a, Transpose(b, p^-1)), p)

The second form only when ``Transpose(b, p^-1)`` is already in the graph (a tf2onnx model's input
is transposed once for its first Conv, and the residual Add reads it again in NHWC): the move then
adds no work. Constants are permuted and one-element operands kept, as in ``transpose_affine``.
Applies to Add, Sub, Mul, Div, Pow, Max, Min, Sum, Mean, Where, the comparisons and logic ops.
Quantization parameters move as in ``_layout`` (per tensor unchanged, per-channel axis remapped).
"""

from __future__ import annotations

from opfuse.passes._driver import RulePass
from opfuse.passes._layout import LayoutRule
from opfuse.passes._push import ELEMENTWISE_OPS, move_past, plan_operands, worth_moving


class PushTransposeElementwise(LayoutRule):
    name = "PushTransposeElementwise"

    def rewrite(self, graph, node):
        if sum(v is not None and v.const_value is None for v in node.inputs) < 2:
            return None
        ops = plan_operands(node)
        if ops is None or not worth_moving(node, ops):
            return None
        return move_past(node, ops)


def elementwise_pass() -> RulePass:
    return RulePass("push_transpose_elementwise", ELEMENTWISE_OPS, (PushTransposeElementwise(),))
