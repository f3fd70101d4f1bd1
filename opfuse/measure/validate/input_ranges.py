"""Which values an integer graph input may take, read from what the model does with it.

Random token ids in [0, 10) overrun a 2-row token-type table, and random 0/1 attention masks give
rows that are all masked; neither is an input the model was made for. So, for each integer (or
bool) graph input, follow it through the ops that only move or retype its values (Cast, Reshape,
Unsqueeze, Squeeze, Flatten, Expand, Slice, Concat...) and look at what reads it:

- the indices of a Gather: draw in [0, rows), rows being the Gather data's size on its axis
  (the smallest, when it indexes several tables): token ids, position ids, token-type ids;
- mask arithmetic (``(1 - mask) * min`` as Sub from a constant, Where's condition, Not/And/Or),
  or a name containing "mask": all ones (attend everywhere).

Other inputs keep validation's default draw. Shapes of the tables come from the initializers,
Constant nodes, and onnx's shape inference for tables computed by the graph.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

import onnx

from opfuse.ops import groups

# ops whose output holds (some of) the input's values unchanged, and the input slots that carry them
_THROUGH = {
    "Cast": (0,), "Identity": (0,), "Reshape": (0,), "Unsqueeze": (0,), "Squeeze": (0,),
    "Flatten": (0,), "Expand": (0,), "Transpose": (0,), "Slice": (0,), "Tile": (0,),
    "Concat": None,  # every input
}
_BOOL_MASK_OPS = groups.LOGIC
_INTEGER = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
            onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
            onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL}


@dataclass(frozen=True)
class IndexRange:
    """Draw in [low, high); ``why`` says which rule chose it."""

    low: int
    high: int
    why: str


def index_ranges(model: onnx.ModelProto | str | Path | None) -> dict[str, IndexRange]:
    """Graph input name -> the range to draw it from, for the inputs a rule above applies to."""
    proto = _proto(model)
    if proto is None:
        return {}
    graph = proto.graph
    consts = {t.name for t in graph.initializer}
    consts |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in graph.node:
        for slot, name in enumerate(node.input):
            if name:
                readers[name].append((node, slot))
    shapes = _shapes(proto)
    ranges: dict[str, IndexRange] = {}
    for vi in graph.input:
        if vi.name in consts or vi.type.tensor_type.elem_type not in _INTEGER:
            continue
        rows, masked = _uses(vi.name, readers, consts, shapes)
        if rows:
            ranges[vi.name] = IndexRange(0, min(rows), f"indexes a table of {min(rows)} rows")
        elif masked or "mask" in vi.name.lower():
            ranges[vi.name] = IndexRange(1, 2, "an attention mask: all ones")
    return ranges


def describe(ranges: dict[str, IndexRange]) -> str | None:
    """One note saying how the integer inputs were drawn (None when no rule applied)."""
    if not ranges:
        return None
    parts = [f"'{name}' all ones" if (r.low, r.high) == (1, 2) else f"'{name}' in [{r.low}, {r.high})"
             for name, r in ranges.items()]
    return "integer inputs drawn within what the model indexes: " + ", ".join(parts)


def _uses(name: str, readers: dict[str, list[tuple[onnx.NodeProto, int]]], consts: set[str],
          shapes: dict[str, tuple[int, ...]]) -> tuple[list[int], bool]:
    """(table sizes the value indexes, whether it is used as a mask), following _THROUGH ops."""
    rows: list[int] = []
    masked = False
    seen, todo = {name}, deque([name])
    while todo:
        value = todo.popleft()
        for node, slot in readers.get(value, ()):
            op = node.op_type
            if op == "Gather" and slot == 1:
                size = _axis_size(node, shapes.get(node.input[0]))
                if size:
                    rows.append(size)
            elif (op == "Where" and slot == 0) or op in _BOOL_MASK_OPS:
                masked = True
            elif op == "Sub" and slot == 1 and node.input[0] in consts:
                masked = True  # (1 - mask): the extended attention mask of BERT-like exports
            elif op in _THROUGH and (_THROUGH[op] is None or slot in _THROUGH[op]):
                for out in node.output:
                    if out and out not in seen:
                        seen.add(out)
                        todo.append(out)
    return rows, masked


def _axis_size(node: onnx.NodeProto, dims: tuple[int, ...] | None) -> int:
    if not dims:
        return 0
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    axis = axis + len(dims) if axis < 0 else axis
    return dims[axis] if 0 <= axis < len(dims) and dims[axis] > 0 else 0


def _shapes(proto: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static dims of initializers, Constant outputs and inferred values (inference may fail on
    a model onnxruntime still runs: then the first two are all there is)."""
    graph = proto.graph
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                shapes[node.output[0]] = tuple(value.dims)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True).graph
    except Exception:  # a model inference rejects: the tables it names are the initializers
        return shapes
    for vi in (*inferred.value_info, *inferred.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes.setdefault(vi.name, tuple(d.dim_value for d in dims))
    return shapes


def _proto(model: onnx.ModelProto | str | Path | None) -> onnx.ModelProto | None:
    if model is None or isinstance(model, onnx.ModelProto):
        return model
    try:  # weights are not needed: their dims are in the proto
        return onnx.load(str(model), load_external_data=False)
    except Exception:  # unreadable: the session that runs it says why
        return None
