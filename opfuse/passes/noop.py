"""Remove ops that compute nothing, and cancel or merge Transpose pairs.

    Identity(x) = x
    Dropout(x) = x               in inference (training_mode absent or false; mask unused)
    Reshape(x, s) = x            when the output shape equals x's shape
    Transpose(x, perm) = x       when perm = (0, 1, ..., n-1)
    Cast(x, to) = x              when x already has dtype ``to``
    Transpose(Transpose(x, p), q) = Transpose(x, r),  r[i] = p[q[i]]; removed when r is the identity

Removing ``y = f(x)`` replaces every use of y with x. When y is a graph output, x takes its name;
that is impossible when x is a graph input, an initializer or itself a graph output, so the op is
kept then (as an Identity). The no-op Transpose/Cast rules are onnxscript's (``no_op_transpose_rule``,
``no_op_cast_rule``); Transpose∘Transpose is ``transpose_merge`` (which also handles an inner
Transpose with other readers), followed by ``transpose_dedupe``. They, and our
no-op Reshape rule, rewrite to Identity, which the forwarding sweep then removes uncounted (the
count goes to the rule that fired). Dropout is in opset >= 12 a node with an optional
``training_mode`` input, which onnxscript's attribute-based Dropout rules never match, so it is
forwarded here directly.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern
from onnxscript.rewriter.rules.common import no_op_cast_rule, no_op_transpose_rule

from opfuse.ir.values import const, static_dims
from opfuse.passes._driver import RulePass, rule_pass
from opfuse.passes.transpose_dedupe import dedupe_pass
from opfuse.passes.transpose_merge import merge_pass
from opfuse.quant import get_quant


class NoOpReshape(pattern.RewriteRuleClassBase):
    def pattern(self, op, x, shape):
        return op.Reshape(x, shape, _allow_other_attributes=True, _outputs=["y"])

    def check(self, context, x: ir.Value, shape: ir.Value, y: ir.Value) -> MatchResult:
        result = MatchResult()
        before, after = static_dims(x), static_dims(y)
        if before is None or before != after:
            return result.fail(f"{y.name}: Reshape changes the shape (or it is not static)")
        if get_quant(x) != get_quant(y):
            return result.fail(f"{y.name}: int8 Reshape requantizes (other params than {x.name})")
        return result

    def rewrite(self, op, x: ir.Value, shape: ir.Value, y: ir.Value) -> ir.Value:
        return op.Identity(x)


def noop_passes() -> list[RulePass]:
    return [
        rule_pass("remove_noop_reshape", ("Reshape",), [NoOpReshape.rule()]),
        rule_pass("remove_noop_transpose", ("Transpose",), [no_op_transpose_rule]),
        merge_pass(),
        dedupe_pass(),
        rule_pass("remove_noop_cast", ("Cast",), [no_op_cast_rule]),
    ]


def forward_sweep(graph: ir.Graph, counted: set[ir.Node], counts: dict[str, int]) -> int:
    """Remove Identity and inference Dropout nodes; count those in ``counted`` (the original ones)."""
    removed = 0
    for node in graph:
        if node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
            continue
        if node.op_type == "Identity":
            name = "remove_identity"
        elif node.op_type == "Dropout" and _inference_dropout(node):
            name = "remove_dropout"
        else:
            continue
        if not _forward(node, node.inputs[0], node.outputs[0]):
            continue
        removed += 1
        if node in counted:
            counts[name] = counts.get(name, 0) + 1
    return removed


def _inference_dropout(node: ir.Node) -> bool:
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        mode = const(node.inputs[2])
        if mode is None or bool(mode.reshape(-1)[0]):
            return False
    return all(not v.uses() and not v.is_graph_output() for v in node.outputs[1:])


def _forward(node: ir.Node, x: ir.Value, y: ir.Value) -> bool:
    """Replace uses of ``y`` by ``x`` and remove ``node``; False when ``y`` must stay."""
    graph = node.graph
    if graph is None:
        return False
    output = y.is_graph_output()
    if output and (x.is_graph_input() or x.is_initializer() or x.is_graph_output()):
        return False
    if x.shape is None:
        x.shape = y.shape
    if x.type is None:
        x.type = y.type
    ir.convenience.replace_all_uses_with(y, x, replace_graph_outputs=True)
    if output:
        name = y.name
        y.name = None
        x.name = name
    graph.remove(node, safe=True)
    return True
