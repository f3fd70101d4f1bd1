"""Structural checks on a raw ModelProto before any library builds objects from it.

onnx_ir and onnxscript trust the proto they are given: a tensor whose data is shorter than its
shape, an attribute whose declared type differs from the field it fills, or a node reading a name
nothing defines surfaces deep inside them as a ValueError or TypeError. Each is checked here once,
at import, and reported as one line naming the node, tensor or value (docs/architecture.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cache

import onnx
from onnx import AttributeProto, TensorProto

from opfuse.errors import OpfuseError
from opfuse.frontends.limits import refuse

MAX_ELEMENTS = 1 << 31  # no edge model has a tensor this large; beyond it is a corrupt dim

# AttributeProto.type -> the field that holds its value
_ATTR_FIELD = {
    AttributeProto.FLOAT: "f",
    AttributeProto.INT: "i",
    AttributeProto.STRING: "s",
    AttributeProto.TENSOR: "t",
    AttributeProto.GRAPH: "g",
    AttributeProto.SPARSE_TENSOR: "sparse_tensor",
    AttributeProto.TYPE_PROTO: "tp",
    AttributeProto.FLOATS: "floats",
    AttributeProto.INTS: "ints",
    AttributeProto.STRINGS: "strings",
    AttributeProto.TENSORS: "tensors",
    AttributeProto.GRAPHS: "graphs",
    AttributeProto.SPARSE_TENSORS: "sparse_tensors",
    AttributeProto.TYPE_PROTOS: "type_protos",
}
_SCALAR_FIELDS = ("f", "i", "s", "t", "g", "sparse_tensor", "tp")


def check_proto(proto: onnx.ModelProto, where: str) -> None:
    """Raise OpfuseError naming the first structural fault of ``proto``."""
    _require_text((proto.producer_name, proto.producer_version, proto.domain, proto.doc_string,
                   *(o.domain for o in proto.opset_import),
                   *(x for p in proto.metadata_props for x in (p.key, p.value))), where, "model")
    versions = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in proto.opset_import}
    refuse(f"{where}: the number of graph outputs", len(proto.graph.output), "outputs", unit="count")
    _check_graph(proto.graph, where, outer=set(), versions=versions)
    _check_bias_shapes(proto.graph, where)


_BIAS_INPUT = {"Conv": (1, 0), "ConvTranspose": (1, 1)}  # op -> (weight input, its channel axis)


def _check_bias_shapes(graph: onnx.GraphProto, where: str) -> None:
    """A Conv/ConvTranspose bias initializer is 1-D with one value per output channel (ONNX's
    definition; folding BatchNorm into a bias of another shape would fail in numpy)."""
    inits = {t.name: t for t in graph.initializer}
    for index, node in enumerate(graph.node):
        if node.op_type not in _BIAS_INPUT or node.domain not in ("", "ai.onnx") or len(node.input) < 3:
            continue
        w_at, axis = _BIAS_INPUT[node.op_type]
        w, b = inits.get(node.input[w_at]), inits.get(node.input[2])
        if w is None or b is None or len(w.dims) <= axis:
            continue
        group = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
        channels = w.dims[axis] * (group if node.op_type == "ConvTranspose" else 1)
        if list(b.dims) != [channels]:
            raise OpfuseError(
                f"{where}: {_label(node, index)}: bias '{b.name}' has shape {list(b.dims)}, "
                f"expected [{channels}] (one value per output channel)"
            )


def _require_text(values: Iterable[object], where: str, what: str) -> None:
    """Every name is text: a proto2 string field holding invalid UTF-8 reads back as bytes,
    which onnx_ir cannot write back."""
    for value in values:
        if type(value) is not str:
            raise OpfuseError(f"{where}: {what} has a name or string that is not UTF-8 text "
                              f"({value!r:.60})")


def _value_texts(vi: onnx.ValueInfoProto) -> tuple:
    tensor = vi.type.tensor_type
    return (vi.name, vi.doc_string, vi.type.denotation,
            *(x for d in tensor.shape.dim for x in (d.dim_param, d.denotation)))


@cache
def _schema(op_type: str, version: int, domain: str) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, version, domain)
    except Exception:  # no such op at that version: shape inference names it
        return None


def _check_arity(node: onnx.NodeProto, label: str, versions: dict[str, int]) -> None:
    """A standard op has as many inputs and outputs as its schema allows, and no required one
    left empty (the rewrites index a Conv's weight without asking whether it is there)."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in ("", "ai.onnx.ml") or domain not in versions:
        return
    schema = _schema(node.op_type, versions[domain], domain)
    if schema is None:
        return
    for kind, names, params, low, high in (
        ("inputs", node.input, schema.inputs, schema.min_input, schema.max_input),
        ("outputs", node.output, schema.outputs, schema.min_output, schema.max_output),
    ):
        if not low <= len(names) <= high:
            span = f"{low}" if low == high else f"{low} to {high}"
            raise OpfuseError(f"{label} has {len(names)} {kind}; {node.op_type} takes {span}")
        for i, name in enumerate(names):
            if name or not params:
                continue
            param = params[min(i, len(params) - 1)]
            if param.option != onnx.defs.OpSchema.FormalParameterOption.Optional:
                raise OpfuseError(f"{label}: {kind[:-1]} {i} ('{param.name}') is required but "
                                  "empty")


def _label(node: onnx.NodeProto, index: int) -> str:
    return f"node '{node.name}' ({node.op_type})" if node.name else f"node #{index} ({node.op_type})"


def _check_graph(
    graph: onnx.GraphProto, where: str, outer: set[str], versions: dict[str, int]
) -> None:
    _require_text((graph.name, graph.doc_string), where, "the graph")
    for vi in (*graph.input, *graph.output, *graph.value_info):
        _require_text(_value_texts(vi), where, "a graph input, output or value_info")
    seen_init: set[str] = set()
    for tensor in graph.initializer:
        name = tensor.name
        _require_text((name, tensor.doc_string), where, "an initializer")
        if name in seen_init:
            raise OpfuseError(f"{where}: initializer '{name}' is defined twice")
        seen_init.add(name)
        check_tensor(tensor, f"{where}: initializer '{name}'")
    inputs = {vi.name for vi in graph.input}
    _check_shadowing(graph, where)
    taken = inputs | seen_init
    available = set(outer) | taken
    nodes = list(graph.node)
    outputs = [list(node.output) for node in nodes]
    for index, outs in enumerate(outputs):
        for name in outs:
            if not name:
                continue
            if name in available:  # written twice, or over a graph input or an initializer
                raise OpfuseError(f"{where}: {_label(nodes[index], index)} writes '{name}', "
                                  f"{_owner(name, taken, nodes, outputs, index)}")
            available.add(name)
    arity_ok: set[tuple] = set()  # (domain, op, #inputs, #outputs) already checked
    for index, node in enumerate(nodes):
        ins, outs = list(node.input), outputs[index]
        op, domain = node.op_type, node.domain
        _require_text((op, domain, node.name, node.doc_string, *outs, *ins), where,
                      f"node #{index}")
        key = (domain, op, len(ins), len(outs))
        if key not in arity_ok or "" in ins or "" in outs:
            _check_arity(node, f"{where}: {_label(node, index)}", versions)
            arity_ok.add(key)
        if len(node.attribute):  # a subgraph sees every name of the enclosing scopes
            for attr in node.attribute:
                _require_text((attr.name, attr.doc_string), where, f"node #{index}")
                _check_attribute(attr, f"{where}: {_label(node, index)}", available, versions)
        for name in ins:
            if name not in available and name:
                raise OpfuseError(
                    f"{where}: {_label(node, index)} reads '{name}', which no node, graph input "
                    "or initializer provides"
                )
    for vi in graph.output:
        if not vi.name:
            raise OpfuseError(f"{where}: a graph output has no name")
        if vi.name not in available:
            raise OpfuseError(f"{where}: graph output '{vi.name}' is never produced")


def _owner(name: str, taken: set[str], nodes: list, outputs: list[list[str]], upto: int) -> str:
    """What else defines ``name`` (for the error message only)."""
    if name in taken:
        return "which is a graph input or initializer"
    first = next((i for i in range(upto) if name in outputs[i]), None)
    if first is None:
        return "a name the enclosing graph already defines"
    return f"which {_label(nodes[first], first)} writes too"


def _check_shadowing(graph: onnx.GraphProto, where: str) -> None:
    """An initializer named like a graph input is that input's default value (IR >= 4), so it
    must fit the input's declared type and shape."""
    inits = {t.name: t for t in graph.initializer}
    for vi in graph.input:
        tensor = inits.get(vi.name)
        if tensor is None or not vi.type.HasField("tensor_type"):
            continue
        declared = vi.type.tensor_type
        if declared.elem_type and declared.elem_type != tensor.data_type:
            raise OpfuseError(f"{where}: initializer '{vi.name}' shadows the graph input of that "
                              "name with another element type")
        if declared.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in declared.shape.dim]
            if len(dims) != len(tensor.dims) or any(
                d is not None and d != t for d, t in zip(dims, tensor.dims, strict=True)
            ):
                raise OpfuseError(
                    f"{where}: initializer '{vi.name}' {list(tensor.dims)} shadows the graph "
                    f"input of that name, declared {[d if d is not None else '?' for d in dims]}"
                )


def _check_attribute(
    attr: AttributeProto, where: str, scope: set[str], versions: dict[str, int]
) -> None:
    at = f"{where} attribute '{attr.name}'"
    if attr.ref_attr_name:
        raise OpfuseError(f"{at} refers to a function attribute outside a function")
    field = _ATTR_FIELD.get(attr.type)
    if field is None:
        raise OpfuseError(f"{at} has no valid type ({attr.type})")
    for other in _SCALAR_FIELDS:
        if other != field and attr.HasField(other):
            raise OpfuseError(f"{at} is declared {AttributeProto.AttributeType.Name(attr.type)} "
                              f"but holds a value of another type")
    for other in set(_ATTR_FIELD.values()) - set(_SCALAR_FIELDS):
        if other != field and len(getattr(attr, other)):
            raise OpfuseError(f"{at} is declared {AttributeProto.AttributeType.Name(attr.type)} "
                              f"but holds a value of another type")
    if field in _SCALAR_FIELDS and field not in ("f", "i", "s") and not attr.HasField(field):
        raise OpfuseError(f"{at} is declared {AttributeProto.AttributeType.Name(attr.type)} "
                          "but holds no value")
    if attr.type == AttributeProto.TENSOR:
        check_tensor(attr.t, at)
    elif attr.type == AttributeProto.TENSORS:
        for tensor in attr.tensors:
            check_tensor(tensor, at)
    elif attr.type == AttributeProto.GRAPH:
        _check_graph(attr.g, at, scope, versions)
    elif attr.type == AttributeProto.GRAPHS:
        for g in attr.graphs:
            _check_graph(g, at, scope, versions)


def _elements(dims: Iterable[int], at: str) -> int:
    dims = list(dims)
    if dims and min(dims) < 0:
        raise OpfuseError(f"{at} has a negative dim {dims}")
    n = math.prod(dims)
    if n > MAX_ELEMENTS:
        raise OpfuseError(f"{at} has {n:,} elements (dims {dims}): more than opfuse accepts")
    return n


_TYPED_FIELD = {
    TensorProto.FLOAT: "float_data",
    TensorProto.DOUBLE: "double_data",
    TensorProto.INT64: "int64_data",
    TensorProto.UINT64: "uint64_data",
    TensorProto.UINT32: "uint64_data",
    TensorProto.INT32: "int32_data",
    TensorProto.INT16: "int32_data",
    TensorProto.INT8: "int32_data",
    TensorProto.UINT16: "int32_data",
    TensorProto.UINT8: "int32_data",
    TensorProto.BOOL: "int32_data",
    TensorProto.FLOAT16: "int32_data",
    TensorProto.BFLOAT16: "int32_data",
    TensorProto.STRING: "string_data",
}


_ITEMSIZE = {
    dtype: onnx.helper.tensor_dtype_to_np_dtype(dtype).itemsize
    for dtype in _TYPED_FIELD
    if dtype != TensorProto.STRING
}


def check_tensor(tensor: TensorProto, at: str) -> None:
    """The tensor's element type is known and its data holds exactly as many elements as its
    dims say (raw bytes or the typed field)."""
    if tensor.data_location == TensorProto.EXTERNAL:
        return  # read from its file later, where the length is checked by the reader
    if tensor.HasField("segment"):
        raise OpfuseError(f"{at}: segmented tensors are not supported")
    dtype = tensor.data_type
    if dtype not in _TYPED_FIELD:
        name = TensorProto.DataType.Name(dtype) if dtype in TensorProto.DataType.values() else dtype
        raise OpfuseError(f"{at}: element type {name} is not supported")
    n = _elements(tensor.dims, at)
    field = _TYPED_FIELD[dtype]
    raw = tensor.raw_data
    if raw:
        if dtype == TensorProto.STRING:
            raise OpfuseError(f"{at}: a string tensor cannot have raw data")
        have, want = len(raw), n * _ITEMSIZE[dtype]
    else:
        have, want = len(getattr(tensor, field)), n
        for other in set(_TYPED_FIELD.values()) - {field}:
            if len(getattr(tensor, other)):
                raise OpfuseError(f"{at}: data stored in {other}, which its element type "
                                  f"({TensorProto.DataType.Name(dtype)}) does not use")
    if have != want:
        unit = "bytes" if raw else "elements"
        raise OpfuseError(f"{at}: data holds {have} {unit}, its dims {list(tensor.dims)} need "
                          f"{want}")
