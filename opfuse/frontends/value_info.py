"""Shape annotations written by exporters, made safe for inference (docs/architecture.md, import).

Exporters such as paddle2onnx write a dynamic dim as ``dim_value: -1`` and leave ``value_info``
traced at another size. onnxruntime ignores both; onnx's strict inference refuses to merge them
with what it infers. Here a non-positive dim becomes an unknown one, and when inference still
disagrees with an annotation, the annotations on values that standard ops produce (which
inference can recompute) give way. Annotations on custom-domain outputs stay: nothing else knows
those shapes.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from opfuse.frontends.large_proto import infer_shapes

STANDARD_DOMAINS = ("", "ai.onnx")


def _subgraphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _subgraphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _subgraphs(g)


def _clear_nonpositive(vi: onnx.ValueInfoProto) -> int:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return 0
    cleared = 0
    for dim in vi.type.tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value <= 0:
            dim.Clear()  # unknown: neither a value nor a name
            cleared += 1
    return cleared


def clear_nonpositive_dims(proto: onnx.ModelProto) -> int:
    """Turn every ``dim_value <= 0`` (paddle2onnx's -1) in inputs, outputs and value_info into an
    unknown dim, in the graph and its subgraphs; returns how many were cleared. An empty tensor is
    not a real model's activation, so 0 is read the same way."""
    cleared = 0
    for graph in _subgraphs(proto.graph):
        for vi in (*graph.input, *graph.output, *graph.value_info):
            cleared += _clear_nonpositive(vi)
    return cleared


def without_inferable_annotations(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy without the shapes of values that standard-domain nodes produce (value_info
    entries dropped, graph-output shapes cleared, element types kept); None when there are none."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    graph = copy.graph
    produced = {out for node in graph.node if node.domain in STANDARD_DOMAINS for out in node.output}
    keep = [vi for vi in graph.value_info if vi.name not in produced]
    changed = len(keep) != len(graph.value_info)
    if changed:
        del graph.value_info[:]
        graph.value_info.extend(keep)
    for vi in graph.output:
        if vi.name in produced and vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.ClearField("shape")
            changed = True
    return copy if changed else None


def bind_value_shapes(
    proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...]]:
    """Write the shapes the user gave for values that nodes produce (a custom op's output that
    nothing describes) into ``value_info``; return the remaining names (graph inputs, unknowns).

    The element type is the one the model already states for the value, else that of the
    producing node's first input (a custom op usually keeps its input's type)."""
    graph = proto.graph
    producers = {out: node for node in graph.node for out in node.output}
    rest = {name: dims for name, dims in shapes.items() if name not in producers}
    given = {name: dims for name, dims in shapes.items() if name in producers}
    if not given:
        return rest
    known = _elem_types(proto)
    entries = {vi.name: vi for vi in graph.value_info}
    for name, dims in given.items():
        vi = entries.get(name)
        if vi is None:
            vi = graph.value_info.add()
            vi.name = name
        tensor = vi.type.tensor_type
        if not tensor.elem_type:
            node = producers[name]
            first = node.input[0] if node.input else ""
            tensor.elem_type = known.get(name) or known.get(first) or onnx.TensorProto.FLOAT
        tensor.ClearField("shape")
        for d in dims:
            tensor.shape.dim.add().dim_value = d
    return rest


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value inference can type (run on a copy; failures give nothing)."""
    graph = proto.graph
    types = {t.name: t.data_type for t in graph.initializer}
    try:
        inferred = infer_shapes(proto, "", data_prop=False).graph
    except Exception:  # a model inference refuses is reported by the real inference later
        inferred = graph
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types
