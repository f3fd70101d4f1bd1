"""Two Transposes of the same value with the same permutation compute the same tensor: keep one.

    a = Transpose(x, p), b = Transpose(x, p)   ->   readers of b read a   (a comes first)

This is what remains after moving Transposes: a model input transposed for its first Conv and
again (by ``transpose_elementwise``, which reuses the first one, or by the exporter) for a
residual Add. The sweep visits ``a`` first, and ``b`` is replaced by an Identity of ``a`` (inserted
after ``a``) that the forwarding sweep removes; the graph is re-sorted afterwards in case a partial
sweep met them in the other order. Not applied when ``b`` is a graph output (its name must stay).
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
        if perm is None or x is None:
            return None
        twin = next(
            (
                user for user, _ in x.uses()
                if user is not node and user.graph is graph and perm_of(user) == perm
                and not user.outputs[0].is_graph_output()
            ),
            None,
        )
        if twin is None:
            return None
        old = twin.outputs[0]
        out = new_value(old, old.shape, get_quant_of(old))
        new = ir.Node("", "Identity", [y], outputs=[out], name=f"{twin.name}_dedup")
        return Delta(Match([twin], [old]), [new], [out])


def dedupe_pass() -> RulePass:
    return RulePass("dedupe_transposes", ("Transpose",), (DedupeTransposes(),))
