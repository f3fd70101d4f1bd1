"""Move a Transpose past a binary op whose other operand is a constant (broadcast-affine).

    Mul(Transpose(x, p), c) = Transpose(Mul(x, c'), p),   c' = Transpose(reshape(c, 1... + c.shape), p^-1)

and the same for Add, Sub, Div, Pow, Max, Min, PRelu and the comparisons, with the constant on
either side. ``c`` is first given leading 1-axes up to the Transpose's rank (numpy broadcasting),
so an NHWC per-channel vector of shape ``(C,)`` becomes ``(1, C, 1, 1)`` for the NCHW ``x``: exactly
the per-channel Mul/Add that ``fold_affine_into_linear`` folds into the Conv before the Transpose.
A one-element constant is left as it is. A per-channel quantization axis of ``c`` moves with it.
Refused when ``c`` has more axes than the Transpose (the output rank would grow).
"""

from __future__ import annotations

from opfuse.passes._driver import RulePass
from opfuse.passes._layout import LayoutRule
from opfuse.passes._push import ELEMENTWISE_OPS, move_past, plan_operands, worth_moving


class PushTransposeAffine(LayoutRule):
    name = "PushTransposeAffine"

    def rewrite(self, graph, node):
        if sum(v is not None and v.const_value is None for v in node.inputs) != 1:
            return None
        ops = plan_operands(node)
        if ops is None or ops.transposed != 1 or not worth_moving(node, ops):
            return None
        return move_past(node, ops)


def affine_push_pass() -> RulePass:
    return RulePass("push_transpose_affine", ELEMENTWISE_OPS, (PushTransposeAffine(),))
