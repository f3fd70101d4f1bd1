"""Topological order on the raw proto, so a cyclic graph is named before any library trips on it."""

from __future__ import annotations

from collections import deque

import onnx

from opfuse.errors import OpfuseError


def sort_or_raise(graph: onnx.GraphProto, where: str) -> None:
    """Reorder ``graph.node`` topologically in place (Kahn); raise naming a node on a cycle."""
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out:
                producer[out] = i
    deps: list[set[int]] = [
        {producer[name] for name in _reads(node) if name in producer} - {i}
        for i, node in enumerate(graph.node)
    ]
    users: list[list[int]] = [[] for _ in graph.node]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    pending = [len(d) for d in deps]
    ready = deque(i for i, p in enumerate(pending) if p == 0)
    order: list[int] = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                ready.append(u)
    if len(order) != len(graph.node):
        stuck = next(i for i, p in enumerate(pending) if p > 0)
        node = graph.node[stuck]
        label = node.name or f"#{stuck} ({node.op_type})"
        raise OpfuseError(f"{where}: graph has a cycle through node '{label}'")
    if order != list(range(len(order))):
        nodes = [graph.node[i] for i in order]
        copies = [onnx.NodeProto() for _ in nodes]
        for c, n in zip(copies, nodes, strict=True):
            c.CopyFrom(n)
        del graph.node[:]
        graph.node.extend(copies)


def _reads(node: onnx.NodeProto) -> set[str]:
    """The names a node reads: its inputs, and those its subgraphs (an If's branches, a Loop's
    body) read from the outer scope, which must be produced before the node runs too."""
    names = set(node.input)
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for sub in graphs:
            for inner in sub.node:
                names |= _reads(inner)
            names |= {o.name for o in sub.output}  # a branch may return an outer value as is
    return names
