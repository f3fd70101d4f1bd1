"""The rewrite driver: apply pattern rules to a graph in one linear sweep, counting each rule.

onnxscript's ``RewriteRuleSet.apply_to_model`` tries every rule on every node and returns one total
count. We need per-pass counts and a sweep that stays cheap on 10k-node graphs, so rules are
dispatched by the op type of their pattern's root node: a node is only offered to the rules that
can end at it. Applying a match follows onnxscript's own driver (register the new initializers,
propagate constants through the new nodes, splice the replacement in after the root node), except
that a new initializer whose name is taken gets a fresh name instead of overwriting the old one (a
weight shared with another node must survive).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import onnx_ir as ir
import onnxscript.optimizer
from onnxscript.rewriter import pattern

from opfuse.ir.provenance import SOURCES_KEY, sources_of
from opfuse.quant import get_quant, set_quant


@dataclass(frozen=True)
class RulePass:
    """One named pass: pattern rules (commuted variants included) rooted at ``roots`` op types."""

    name: str
    roots: tuple[str, ...]
    rules: tuple[pattern.RewriteRule, ...]


def rule_pass(
    name: str, roots: Iterable[str], rules: Iterable[pattern.RewriteRule], commute: bool = False
) -> RulePass:
    expanded: list[pattern.RewriteRule] = []
    for rule in rules:
        expanded.extend(rule.commute() if commute else [rule])
    return RulePass(name, tuple(roots), tuple(expanded))


def sweep(
    model: ir.Model,
    passes: Sequence[RulePass],
    counts: dict[str, int],
    only: set[ir.Node] | None = None,
    touched: set[ir.Node] | None = None,
) -> int:
    """Offer every node of the main graph (or those in ``only``) to the passes rooted at its op
    type, in order.

    Nodes inserted by a rewrite come after the root and are visited in the same sweep; they and
    their neighbours two edges downstream and one upstream are added to ``touched``, which is all
    a later round needs to revisit (a rule is rooted at the last node of its pattern).
    Returns the number of rewrites applied; ``counts`` is updated per pass.
    """
    graph = model.graph
    by_op: dict[str, list[tuple[str, pattern.RewriteRule, tuple]]] = {}
    for rp in passes:
        for root in rp.roots:
            by_op.setdefault(root, []).extend(
                (rp.name, rule, producer_ops(rule)) for rule in rp.rules
            )
    applied = 0
    for node in graph:
        if node.domain not in ("", "ai.onnx") or (only is not None and node not in only):
            continue
        for name, rule, needs in by_op.get(node.op_type, ()):
            if needs and not _producers_are(node, needs):
                continue  # cheap pre-check: the matcher would fail on the first edge anyway
            delta = rule.try_rewrite(model, graph, node)
            if delta is None or not quant_safe(name, delta.match.nodes):
                continue
            _apply(graph, node, rule, delta)
            if touched is not None:
                _mark_neighbourhood(delta.new_nodes, touched)
            if only is not None:
                only.update(delta.new_nodes)
            counts[name] = counts.get(name, 0) + 1
            applied += 1
            break
    return applied


# Passes that read QuantParams and stay exact on int8 values (docs/architecture.md, "int8 in the
# IR"); every other pass leaves a match that touches a quantized value alone.
QUANT_AWARE = frozenset({
    "normalize_conv_auto_pad", "fuse_pad_into_conv", "fuse_pad_into_avgpool",
    "fuse_pad_into_maxpool",
    # the layout pushes move each value's params with it (per-channel axes remapped: _layout.py)
    "push_transpose_unary", "push_transpose_affine", "push_transpose_elementwise",
    "push_transpose_pad", "push_transpose_concat", "push_transpose_reduce",
})  # fmt: skip
# Passes that remove data movement: exact on int8 only when every value has the same params
# (otherwise the op was also a requantization).
QUANT_SAME_PARAMS = frozenset({"remove_noop_reshape", "remove_noop_transpose", "merge_transposes",
                               "remove_noop_cast", "dedupe_transposes", "transpose_to_reshape"})


def quant_safe(name: str, nodes: Sequence[ir.Node]) -> bool:
    """Whether pass ``name`` may rewrite the matched ``nodes`` of a (possibly) quantized graph."""
    values = [v for n in nodes for v in (*n.inputs, *n.outputs) if v is not None]
    params = [get_quant(v) for v in values if not (v.is_initializer() or v.const_value is not None)]
    if all(p is None for p in params) or name in QUANT_AWARE:
        return True
    if name in QUANT_SAME_PARAMS:
        return all(p is not None and p == params[0] for p in params)
    return False


def producer_ops(rule: pattern.RewriteRule) -> tuple[tuple[int, str], ...]:
    """(input index, op type) the rule's root requires of the producers of its inputs.

    Read from the pattern itself (onnxscript's pattern IR); a form we do not recognise gives no
    requirement, so the pre-check can only skip rules that could not match."""
    try:
        root = rule._target_pattern.outputs[0].producer()
        needs = []
        for i, value in enumerate(root.inputs):
            producer = value.producer() if hasattr(value, "producer") else None
            op = getattr(producer, "op", None)
            if op is not None and type(op).__name__ == "StringConstantPattern":
                needs.append((i, op.value()))
        return tuple(needs)
    except (AttributeError, IndexError, TypeError):
        return ()


def _producers_are(node: ir.Node, needs: tuple[tuple[int, str], ...]) -> bool:
    for i, op_type in needs:
        if i >= len(node.inputs) or node.inputs[i] is None:
            return False
        producer = node.inputs[i].producer()
        if producer is None or producer.op_type != op_type:
            return False
    return True


def _mark_neighbourhood(nodes: Iterable[ir.Node], touched: set[ir.Node]) -> None:
    for node in nodes:
        touched.add(node)
        for value in node.inputs:
            if value is not None and value.producer() is not None:
                touched.add(value.producer())
        for value in node.outputs:
            for user, _ in value.uses():
                touched.add(user)
                for out in user.outputs:
                    touched.update(u for u, _ in out.uses())


def _apply(graph: ir.Graph, root: ir.Node, rule: pattern.RewriteRule, delta) -> None:
    for value in delta.new_initializers:
        if value.name in graph.initializers:
            value.name = fresh_name(graph, value.name)
        graph.initializers[value.name] = value
    onnxscript.optimizer.basic_constant_propagation(delta.new_nodes)
    removed = list(delta.match.nodes) if rule.remove_nodes else []
    for old, new in zip(delta.match.outputs, delta.new_outputs, strict=False):
        if get_quant(new) is None:  # a value a rule creates keeps the params of the one it replaces
            set_quant(new, get_quant(old))
    ir.convenience.replace_nodes_and_values(
        graph, root, removed, delta.new_nodes, delta.match.outputs, delta.new_outputs
    )
    _keep_provenance(removed, delta.new_nodes)


def _keep_provenance(removed: Sequence[ir.Node], created: Sequence[ir.Node]) -> None:
    """A rewritten node keeps the name of the node it replaces (the Conv a BatchNorm folded into
    stays 'conv1') and records every imported node it now computes, so kernels map back to the
    names a user knows."""
    if not removed:
        return
    sources: list[str] = []
    for node in removed:
        sources.extend(s for s in sources_of(node) if s not in sources)
    taken: set[str] = set()
    for new in created:
        new.metadata_props[SOURCES_KEY] = ",".join(sources)
        twin = next(
            (old for old in removed if old.op_type == new.op_type and old.name not in taken), None
        )
        if twin is not None and twin.name:
            new.name = twin.name
            taken.add(twin.name)


def fresh_name(graph: ir.Graph, base: str) -> str:
    i = 1
    while f"{base}_{i}" in graph.initializers:
        i += 1
    return f"{base}_{i}"
