"""Move a Transpose past an activation or other one-input elementwise op.

    f(Transpose(x, p)) = Transpose(f(x), p)

for every ``f`` in ``_push.UNARY_OPS`` (Relu, Clip, Sigmoid, HardSwish, Cast...): ``f`` acts on each
element alone, so the order of the elements does not matter. Extra inputs (Clip's bounds, PRelu's
slope) are constants and are permuted like a broadcast operand (``_push``). The quantization
parameters of ``f(x)`` are those of ``f(Transpose(x, p))``, with a per-channel axis ``a`` moved to
``p[a]``. Refused when the Transpose is also read by an op it cannot move past (it would then stay,
and a second one would appear after ``f``).
"""

from __future__ import annotations

from opfuse.passes._driver import RulePass
from opfuse.passes._layout import LayoutRule, transpose_source
from opfuse.passes._push import UNARY_OPS, move_past, plan_operands, worth_moving


class PushTransposeUnary(LayoutRule):
    name = "PushTransposeUnary"

    def rewrite(self, graph, node):
        if not node.inputs or transpose_source(node.inputs[0]) is None:
            return None
        ops = plan_operands(node)
        if ops is None or ops.other or not worth_moving(node, ops):
            return None
        return move_past(node, ops)


def unary_pass() -> RulePass:
    return RulePass("push_transpose_unary", UNARY_OPS, (PushTransposeUnary(),))
