"""Constant folding: evaluate nodes whose inputs all became constants after the rewrites.

    f(c1, ..., cn) -> c = f(c1, ..., cn)      (an initializer replaces the node)

onnxscript's ``fold_constants`` does the work (its reference evaluator, size limits lifted as in
the frontend: a weight built by arithmetic on constants must become one initializer for the
folds above to see it). Its onnx shape inference per node is off: shapes are static already and
per-node inference would dominate compile time on large graphs. The folder is only called when some
node reads nothing but constants (our rewrites write their constants as initializers, so this is
rare after import, where the frontend already folded). The count is the number of nodes that
disappeared (folded nodes, and the constant-only subgraphs feeding them).
"""

from __future__ import annotations

import onnx_ir as ir
import onnxscript.optimizer

from opfuse.ops import groups
from opfuse.quant import get_quant

_NO_LIMIT = 1 << 40


def has_foldable(graph: ir.Graph) -> bool:
    """Whether a node reads only constants (and reads something)."""
    for node in graph:
        inputs = [v for v in node.inputs if v is not None]
        if inputs and all(v.const_value is not None for v in inputs) and _should_fold(node) is None:
            return True
    return False


def _should_fold(node: ir.Node) -> bool | None:
    """Never evaluate an int8 node with float semantics: a quantized Add of two constants is not
    numpy's int8 addition (docs/architecture.md, "int8 in the IR"); Q/DQ keep int8 weights int8."""
    if node.op_type in groups.CONVERSIONS:
        return False
    if any(get_quant(v) is not None for v in (*node.inputs, *node.outputs) if v is not None):
        return False
    return None


def fold_constants(model: ir.Model) -> int:
    """Fold in place; return how many nodes were removed."""
    if not has_foldable(model.graph):
        return 0
    onnxscript.optimizer.remove_unused_nodes(model)
    before = len(model.graph)
    onnxscript.optimizer.fold_constants(
        model,
        onnx_shape_inference=False,
        input_size_limit=_NO_LIMIT,
        output_size_limit=_NO_LIMIT,
        should_fold=_should_fold,
    )
    onnxscript.optimizer.remove_unused_nodes(model)
    return max(before - len(model.graph), 0)
