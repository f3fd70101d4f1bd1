"""Two Transposes of the same value with the same permutation compute the same tensor: keep one.

    a = Transpose(x, p), b = Transpose(x, p)   ->   readers of b read a

This is what remains after moving Transposes: a model input transposed for its first Conv and
again (by ``transpose_elementwise``, which reuses the first one, or by the exporter) for a
residual Add. ``b`` is replaced by an Identity of ``a`` that the forwarding sweep removes; the
graph is re-sorted afterwards since ``a`` may come after ``b``'s readers. Not applied when ``b`` is
a graph output (its name must stay).
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.passes._driver import RulePass
from opfuse.passes._layout import Delta, LayoutRule, Match, get_quant_of, new_value, perm_of


class DedupeTransposes(LayoutRule):
    name = "DedupeTransposes"

    def rewrite(self, graph, node):
        perm = perm_of(node)
        x = node.inputs[0] if node.inputs else None
        y = node.outputs[0]
        if perm is None or x is None or y.is_graph_output():
            return None
        twin = next(
            (
                user for user, _ in x.uses()
                if user is not node and user.graph is graph and perm_of(user) == perm
            ),
            None,
        )
        if twin is None:
            return None
        out = new_value(y, y.shape, get_quant_of(y))
        new = ir.Node("", "Identity", [twin.outputs[0]], outputs=[out], name=f"{node.name}_dedup")
        return Delta(Match([node], [y]), [new], [out])


def dedupe_pass() -> RulePass:
    return RulePass("dedupe_transposes", ("Transpose",), (DedupeTransposes(),))
