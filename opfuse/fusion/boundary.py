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
        for value in node.inputs:
            if value is not None and id(value) not in made:
                inputs.setdefault(value.name, None)
        for value in node.outputs:
            made.add(id(value))
            if value.is_graph_output() or any(id(c) not in inside for c in value.consumers()):
                outputs.setdefault(value.name, None)
    return tuple(inputs), tuple(outputs)
