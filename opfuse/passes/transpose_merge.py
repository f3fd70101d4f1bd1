"""Merge consecutive Transposes; an inverse pair cancels.

    Transpose(Transpose(x, p), q) = Transpose(x, r),   r[i] = p[q[i]]
    ... = x                                            when r is the identity (q = p^-1)

Axis ``i`` of the result is axis ``q[i]`` of the inner Transpose, which is axis ``p[q[i]]`` of
``x``. Unlike onnxscript's ``transpose_transpose_rule`` this also applies when the inner Transpose
has other readers: it then stays for them, and only the outer one is replaced. The cancelled form
becomes an Identity, which the driver's forwarding sweep removes (or keeps, when the result is a
graph output and ``x`` a graph input). Quantization parameters: a Transpose's input and output
carry the same ones up to the axis permutation, so the result keeps those of the outer output.
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.passes._driver import RulePass
from opfuse.passes._layout import (
    Delta,
    LayoutRule,
    Match,
    get_quant_of,
    is_identity,
    new_value,
    only_read_by,
    perm_of,
    transpose_node,
    transpose_source,
)


class MergeTransposes(LayoutRule):
    name = "MergeTransposes"

    def rewrite(self, graph, node):
        outer = perm_of(node)
        src = transpose_source(node.inputs[0] if node.inputs else None)
        if outer is None or src is None:
            return None
        x, inner, inner_node = src
        if len(inner) != len(outer):
            return None
        merged = tuple(inner[outer[i]] for i in range(len(outer)))
        y = node.outputs[0]
        dying = [inner_node] if only_read_by(node.inputs[0], node) else []
        out = new_value(y, y.shape, get_quant_of(y))
        if is_identity(merged):
            new = ir.Node("", "Identity", [x], outputs=[out], name=f"{node.name}_cancelled")
        else:
            new = transpose_node(x, merged, out, node.name)
        return Delta(Match([*dying, node], [y]), [new], [out])


def merge_pass() -> RulePass:
    return RulePass("merge_transposes", ("Transpose",), (MergeTransposes(),))
