"""Sizes a model asks for, checked against opfuse/frontends/limits.py before anything is allocated
(docs/architecture.md, "Outputs and limits"): every value with an inferred static shape is either
a constant the import will fold (its producer reads only constants) or an activation, and each
kind has its limit. ``FoldGuard`` repeats the constant check inside the folder, from the node's
constant inputs, for the fills whose shape inference could not say (ConstantOfShape, Expand,
Tile, Range)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx_ir as ir

from opfuse.frontends.limits import refuse, refuse_expansion, tensor_bytes
from opfuse.ir.values import const

_FOLDED_BY_IMPORT = ("", "ai.onnx")


def value_shapes(graph: onnx.GraphProto) -> dict[str, tuple[tuple[int, ...], int]]:
    """Name -> (static dims, bytes per element) for every declared or inferred tensor value whose
    dims are all known."""
    out: dict[str, tuple[tuple[int, ...], int]] = {}
    sizes: dict[int, int] = {}  # elem_type -> bytes (0: no fixed size, such as strings)
    for vi in (*graph.input, *graph.value_info, *graph.output):
        tensor = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tensor.HasField("shape"):
            continue
        dims = tuple(d.dim_value for d in tensor.shape.dim)
        if not all(d.HasField("dim_value") for d in tensor.shape.dim) or min(dims, default=0) < 0:
            continue
        if tensor.elem_type not in sizes:
            sizes[tensor.elem_type] = _itemsize(tensor.elem_type)
        if sizes[tensor.elem_type]:
            out[vi.name] = (dims, sizes[tensor.elem_type])
    return out


def _itemsize(elem_type: int) -> int:
    try:
        return max(onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize, 1)
    except (KeyError, TypeError, ValueError):
        return 0


def _producers(graph: onnx.GraphProto) -> tuple[dict[str, str], set[str]]:
    """Output name -> its node's label, and the values the import folds into constants."""
    const = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    producer: dict[str, str] = {}
    folded: set[str] = set()
    for index, node in enumerate(graph.node):
        label = node.name or f"{node.op_type} #{index}"
        outs = [o for o in node.output if o]
        producer.update((o, label) for o in outs)
        ins = [i for i in node.input if i]
        if node.domain in _FOLDED_BY_IMPORT and (
            node.op_type == "Constant" or (ins and all(i in const for i in ins))
        ):
            const.update(outs)
            folded.update(outs)
    return producer, folded


def check_sizes(proto: onnx.ModelProto, where: str,
                values: dict[str, tuple[tuple[int, ...], int]] | None = None,
                model_bytes: int | None = None) -> None:
    """Refuse a folded constant, all folded constants together (also against ``expansion``
    times ``model_bytes``, the model's own size: the proto's by default), or any activation over
    its limit; the message names the node (or graph input) and the value. ``values``:
    ``value_shapes`` of the graph, when the caller has it."""
    graph = proto.graph
    model_bytes = proto.ByteSize() if model_bytes is None else model_bytes
    shapes = value_shapes(graph) if values is None else values
    producer, folded = _producers(graph)
    total = 0
    for name in [n for n in shapes if n in folded]:
        dims, itemsize = shapes[name]
        size = tensor_bytes(dims, itemsize)
        refuse(f"{where}: node '{producer[name]}' folds into constant '{name}' {list(dims)}, which",
               size, "constant")
        total += size
        refuse(f"{where}: the constants folded at import (up to node '{producer[name]}')", total,
               "constants_total")
        refuse_expansion(f"{where}: the constants folded at import (up to node "
                         f"'{producer[name]}')", total, model_bytes)
    inputs = {i.name for i in graph.input}
    for name, (dims, itemsize) in shapes.items():
        if name in folded:
            continue
        what = f"input '{name}'" if name in inputs and name not in producer else (
            f"node '{producer.get(name, '?')}' output '{name}'")
        refuse(f"{where}: {what} {list(dims)}", tensor_bytes(dims, itemsize),
               "activation")


def _input_const(node: ir.Node, index: int) -> np.ndarray | None:
    """The constant contents of input ``index`` of ``node`` (``opfuse.ir.values.const``)."""
    return const(node.inputs[index]) if index < len(node.inputs) else None


def _fill_elements(node: ir.Node) -> int | None:
    """Elements a fill op would produce, from its constant inputs; None when not known."""
    op = node.op_type
    if op == "ConstantOfShape":
        shape = _input_const(node, 0)
        return None if shape is None else math.prod(int(d) for d in shape.reshape(-1))
    if op in ("Expand", "Tile"):
        data, other = node.inputs[0] if node.inputs else None, _input_const(node, 1)
        if data is None or other is None or data.shape is None or not data.shape.is_static():
            return None
        dims = [int(d) for d in data.shape]
        other = [int(d) for d in other.reshape(-1)]
        if op == "Tile":
            return math.prod(d * r for d, r in zip(dims, other, strict=False))
        width = max(len(dims), len(other))
        dims = [1] * (width - len(dims)) + dims
        other = [1] * (width - len(other)) + other
        return math.prod(max(a, b) for a, b in zip(dims, other, strict=True))
    if op == "Range":
        start, limit, delta = (_input_const(node, i) for i in range(3))
        if start is None or limit is None or delta is None or float(delta) == 0:
            return None
        return max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    return None


class FoldGuard:
    """Called by the constant folder before it evaluates a node: refuse a fill over the constant
    limit, or fills that together pass ``expansion`` times the model's ``model_bytes``."""

    def __init__(self, where: str, model_bytes: int) -> None:
        self.where, self.model_bytes, self.total = where, model_bytes, 0

    def __call__(self, node: ir.Node) -> None:
        elements = _fill_elements(node)
        out = node.outputs[0] if node.outputs else None
        if elements is None or out is None:
            return
        itemsize = out.dtype.itemsize if out.dtype is not None else 4
        size = math.ceil(elements * itemsize)
        what = f"{self.where}: node '{node.name or node.op_type}' folds into constant '{out.name}'"
        refuse(f"{what}, which", size, "constant")
        self.total += size
        refuse_expansion(f"{what}; the fills folded so far", self.total, self.model_bytes)
