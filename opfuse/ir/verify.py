"""`verify(model)`: the invariants every stage hands to the next, checked between stages."""

from __future__ import annotations

import onnx_ir as ir

from opfuse.errors import OpfuseError


class GraphInvariantError(OpfuseError):
    """A stage produced a malformed graph: a bug in opfuse, not in the user's model."""


def verify(model: ir.Model, stage: str = "") -> None:
    """Check: unique node names, topological order, every input defined, static shapes."""
    graph = model.graph
    where = f"after {stage}: " if stage else ""
    defined: set[int] = {id(v) for v in graph.inputs}
    defined.update(id(v) for v in graph.initializers.values())
    names: set[str] = set()
    for node in graph:
        if not node.name or node.name in names:
            raise GraphInvariantError(f"{where}node name '{node.name}' is empty or repeated")
        names.add(node.name)
        for value in node.inputs:
            if value is not None and id(value) not in defined:
                raise GraphInvariantError(
                    f"{where}node '{node.name}' reads '{value.name}' before it is produced"
                )
        defined.update(id(v) for v in node.outputs)
    for value in graph.outputs:
        if id(value) not in defined:
            raise GraphInvariantError(f"{where}graph output '{value.name}' is never produced")
