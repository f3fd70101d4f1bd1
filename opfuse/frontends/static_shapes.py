"""Shapes that only folding can tell: infer again after the fold, fold again, until settled.

Exporters compute sizes at run time even when every input is static: ``torch.onnx.export`` of
``F.pad`` builds its pads with Shape, Gather, ConstantOfShape, Concat, Slice and Cast; a flatten
reads its batch with Shape -> Gather -> Unsqueeze -> Concat -> Reshape; a class token is Expand-ed
to a shape read from the input; an attention mask goes through Equal and Where over constants.
The import's first shape inference cannot see through all of these (data propagation stops at
Where, Equal, ConstantOfShape...), so the values behind them get symbolic dims (``unk__0``), while
the folder that runs next turns the whole subgraph into constants. One more inference over the
folded graph then knows every size, which may make more Shape ops foldable; the rounds repeat
until no value is unknown or a round changes nothing (docs/architecture.md, "Import: what is
checked, and sizes nobody states").

The libraries do the work: onnx's shape inference through onnx-ir's ``ShapeInferencePass`` (it
serializes without the large initializers) and the caller's onnxscript fold. What is written
here is the loop, forgetting the stale symbolic dims so inference may replace them, and the
activation-size check for the values whose size became known (the import checked the others).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from opfuse.frontends.limits import refuse, tensor_bytes
from opfuse.ir import is_static

MAX_ROUNDS = 4  # a flatten behind a computed Pad needs two; deeper chains are rare


def settle_shapes(model: ir.Model, fold: Callable[[ir.Model], None], where: str) -> int:
    """Infer and fold until every node output is static or nothing changes; return the rounds run.

    ``fold`` is the import's constant fold (limits included)."""
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        unknown = _unsettled(model)
        if not unknown:
            return rounds - 1
        _infer(model, unknown)
        _check_activations(unknown, where)
        nodes = len(model.graph)
        fold(model)
        if len(model.graph) == nodes and len(_unsettled(model)) == len(unknown):
            break  # what is left is a size no rewrite here can tell (an opaque op's output)
    return rounds


def _unsettled(model: ir.Model) -> list[ir.Value]:
    """Node outputs whose shape is not static, and the outputs of Shape ops left (one left over a
    static input means another fold may remove it)."""
    for value in model.graph.initializers.values():
        if value.const_value is not None and value.shape != value.const_value.shape:
            value.shape = value.const_value.shape  # a folded value keeps its stale dims
    values: list[ir.Value] = []
    for node in model.graph:
        for value in node.outputs:
            if not is_static(value) and (value.uses() or value.is_graph_output()):
                values.append(value)
        if node.op_type == "Shape" and node.outputs[0] not in values:
            values.append(node.outputs[0])
    return values


def _infer(model: ir.Model, unknown: list[ir.Value]) -> None:
    """Onnx inference over the folded graph; the stale dims are forgotten first so that inference
    is not held to them, and put back when inference fails (the model is then as it was)."""
    saved = {value: value.shape for value in unknown}
    for value in unknown:
        value.shape = None
    with _quiet(logging.getLogger(ShapeInferencePass.__module__)):
        result = ShapeInferencePass(check_type=True, strict_mode=True, data_prop=True)(model)
    if not result.modified:
        for value, shape in saved.items():
            value.shape = shape


def _check_activations(values: list[ir.Value], where: str) -> None:
    for value in values:
        if is_static(value) and value.dtype is not None:
            producer = value.producer()
            label = producer.name or producer.op_type if producer is not None else "?"
            refuse(f"{where}: node '{label}' output '{value.name}' {list(value.shape)}",
                   tensor_bytes(list(value.shape), value.dtype.itemsize), "activation")


class _quiet:
    """The pass logs a warning when inference fails; here failure only means "sizes stay
    unknown", which analyze reports itself."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._disabled = logger.disabled

    def __enter__(self) -> None:
        self._logger.disabled = True

    def __exit__(self, *exc: object) -> None:
        self._logger.disabled = self._disabled
