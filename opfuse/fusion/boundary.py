"""What a kernel of given members reads and writes across its boundary (docs/architecture.md,
"Traffic accounting"): the values the partitioner and the attention merge record on a ``Kernel``."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir


def boundary(members: Sequence[ir.Node]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(inputs, outputs) of a kernel of ``members`` in schedule order: what it reads that no member
    made, and what it writes that a node outside reads or that is a graph output; first-seen order."""
    inside = {id(n) for n in members}
    made: set[int] = set()
    inputs: dict[str, None] = {}
    outputs: dict[str, None] = {}
    for node in members:
        for value in (*node.inputs, *captured(node)):
            if value is not None and id(value) not in made:
                inputs.setdefault(value.name, None)
        for value in node.outputs:
            made.add(id(value))
            if value.is_graph_output() or any(id(c) not in inside for c in value.consumers()):
                outputs.setdefault(value.name, None)
    return tuple(inputs), tuple(outputs)


def captured(node: ir.Node) -> list[ir.Value]:
    """The outer values a node's subgraphs read (an If's branches, a Loop's body): inputs of the
    node as much as its listed ones, so the arena keeps them until it runs."""
    found: list[ir.Value] = []
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            graphs = [attr.value]
        elif attr.type == ir.AttributeType.GRAPHS:
            graphs = list(attr.value)
        else:
            continue
        for graph in graphs:
            defined = {id(v) for v in graph.inputs} | {id(v) for v in graph.initializers.values()}
            for inner in graph:
                for value in (*inner.inputs, *captured(inner)):
                    if value is not None and id(value) not in defined:
                        found.append(value)
                defined.update(id(v) for v in inner.outputs)
            found.extend(v for v in graph.outputs if id(v) not in defined)
    return found
