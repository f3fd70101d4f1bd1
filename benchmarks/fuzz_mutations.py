"""The fuzzer's mutations of a serialized ONNX model (benchmarks/fuzz.py runs them).

Byte level: bit flips and truncation. Structure level: delete, duplicate or set to an edge value any
field anywhere in the proto, out-of-range attributes, tensors whose data is shorter than their
shape, initializers shadowing graph inputs, two nodes writing one name, zero and negative dims,
NaN/inf/zero/negative quantization scales, graph outputs made empty by a backward Slice, and
initializers sharing one external region. Every mutation draws
from the ``random.Random`` it is given, so a case is reproduced from its seed.
"""

from __future__ import annotations

import random

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor

EDGE_INTS = (0, -1, 1, 2, 3, -2, 7, 99, -99, 2**31 - 1, -(2**31), 2**62, 2**63 - 1)
EDGE_FLOATS = (0.0, -1.0, 1e30, -1e30, float("nan"), float("inf"), 1e-30)


def _repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 5; older ones have ``label``
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _messages(msg, path: str = ""):
    """(path, message) for ``msg`` and every message inside it."""
    yield path, msg
    for field, value in msg.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if _repeated(field):
            for i, item in enumerate(value):
                yield from _messages(item, f"{path}.{field.name}[{i}]")
        else:
            yield from _messages(value, f"{path}.{field.name}")


def _edge_scalar(field: FieldDescriptor, rng: random.Random):
    t = field.type
    if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice(EDGE_FLOATS)
    if t == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if t == FieldDescriptor.TYPE_STRING:
        return rng.choice(["", "x", "a" * 300, "..", "/etc/passwd", "\u00e9", "w1"])
    if t == FieldDescriptor.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 3, 17))))
    if t == FieldDescriptor.TYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values] + [0])
    value = rng.choice(EDGE_INTS)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED32,
             FieldDescriptor.TYPE_FIXED64):
        value = abs(value)
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32,
             FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        value = max(min(value, 2**31 - 1), -(2**31)) if value < 2**32 else 2**31 - 1
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            value = abs(value)
    return value


def mutate_field(proto: onnx.ModelProto, rng: random.Random) -> str:
    """Delete, duplicate or set one field somewhere in the model."""
    path, msg = rng.choice(list(_messages(proto)))
    fields = [f for f in msg.DESCRIPTOR.fields]
    if not fields:
        return "noop"
    field = rng.choice(fields)
    where = f"{path}.{field.name}"
    if _repeated(field):
        items = getattr(msg, field.name)
        if not len(items):
            return f"empty {where}"
        i = rng.randrange(len(items))
        action = rng.choice(("delete", "duplicate", "set"))
        if action == "delete":
            del items[i]
        elif action == "duplicate":
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                items.add().CopyFrom(items[i])
            else:
                items.append(items[i])
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            items[i].Clear()
        else:
            items[i] = _edge_scalar(field, rng)
        return f"{action} {where}[{i}]"
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        msg.ClearField(field.name)
        return f"clear {where}"
    if rng.random() < 0.3:
        msg.ClearField(field.name)
        return f"clear {where}"
    setattr(msg, field.name, _edge_scalar(field, rng))
    return f"set {where}"


def mutate_attribute(proto: onnx.ModelProto, rng: random.Random) -> str:
    """An out-of-range attribute: axis 99, stride 0, negative pads, group 0, perm out of range."""
    nodes = [n for n in proto.graph.node if n.attribute]
    if not nodes:
        return "noop"
    node = rng.choice(nodes)
    attr = rng.choice(list(node.attribute))
    if attr.type == onnx.AttributeProto.INT:
        attr.i = rng.choice(EDGE_INTS)
    elif attr.type == onnx.AttributeProto.INTS and len(attr.ints):
        attr.ints[rng.randrange(len(attr.ints))] = rng.choice(EDGE_INTS)
        if rng.random() < 0.3:
            attr.ints.append(rng.choice(EDGE_INTS))
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = rng.choice(EDGE_FLOATS)
    elif attr.type == onnx.AttributeProto.STRING:
        attr.s = rng.choice([b"", b"NOPE", b"SAME_UPPER", b"\xff"])
    else:
        attr.type = rng.choice([t for t in range(1, 14) if t != attr.type])
    return f"attribute {node.name}.{attr.name}"


def short_tensor(proto: onnx.ModelProto, rng: random.Random) -> str:
    """An initializer whose data is shorter (or longer) than its shape says."""
    inits = list(proto.graph.initializer)
    if not inits:
        return "noop"
    t = rng.choice(inits)
    if t.raw_data:
        cut = rng.randrange(len(t.raw_data))
        t.raw_data = t.raw_data[:cut] if rng.random() < 0.8 else t.raw_data + b"\0" * 7
    elif len(t.float_data):
        del t.float_data[rng.randrange(len(t.float_data)):]
    elif len(t.int64_data):
        del t.int64_data[rng.randrange(len(t.int64_data)):]
    elif len(t.dims):
        t.dims[rng.randrange(len(t.dims))] += rng.choice((1, 5, 1000))
    return f"short tensor {t.name}"


def shadow_input(proto: onnx.ModelProto, rng: random.Random) -> str:
    """An initializer with the name of a graph input (of the same or of another shape)."""
    graph = proto.graph
    if not graph.input:
        return "noop"
    vi = rng.choice(list(graph.input))
    dims = [d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
    if rng.random() < 0.5 and dims:
        dims[-1] += 1
    n = 1
    for d in dims:
        n *= d
    n = min(n, 1 << 20)
    t = onnx.helper.make_tensor(vi.name, onnx.TensorProto.FLOAT, dims if n < (1 << 20) else [n],
                                [0.5] * n)
    graph.initializer.append(t)
    return f"shadow input {vi.name}"


def rename_collision(proto: onnx.ModelProto, rng: random.Random) -> str:
    """Two nodes writing the same value, or a node reading a value nothing writes."""
    nodes = list(proto.graph.node)
    if len(nodes) < 2:
        return "noop"
    a, b = rng.sample(nodes, 2)
    if rng.random() < 0.5 and a.output and b.output:
        b.output[0] = a.output[0]
        return f"collide {b.name}->{a.output[0]}"
    if a.input:
        a.input[rng.randrange(len(a.input))] = rng.choice(["ghost", "", b.output[0] if b.output
                                                           else "ghost"])
    return f"rewire {a.name}"


def bad_dim(proto: onnx.ModelProto, rng: random.Random) -> str:
    """A zero or negative dim: in a graph input's shape, or in an int64 initializer (a Reshape
    shape, a Pad's pads, a Slice's ends) that sizes a tensor."""
    graph = proto.graph
    shapes = [t for t in graph.initializer if t.data_type == onnx.TensorProto.INT64 and t.dims
              and len(t.dims) == 1 and 0 < t.dims[0] <= 8]
    if shapes and rng.random() < 0.5:
        t = rng.choice(shapes)
        try:  # an earlier mutation of the same case may have cut its data
            values = list(onnx.numpy_helper.to_array(t))
        except ValueError:
            return "noop"
        values[rng.randrange(len(values))] = rng.choice((0, -2, -3, -(1 << 40)))
        t.CopyFrom(onnx.numpy_helper.from_array(np.array(values, np.int64), t.name))
        return f"bad dim in {t.name}"
    inputs = [vi for vi in graph.input if vi.type.tensor_type.shape.dim]
    if not inputs:
        return "noop"
    vi = rng.choice(inputs)
    dims = vi.type.tensor_type.shape.dim
    dims[rng.randrange(len(dims))].dim_value = rng.choice((0, -2, -7))
    return f"bad dim in input {vi.name}"


def bad_scale(proto: onnx.ModelProto, rng: random.Random) -> str:
    """A quantization scale of NaN, inf, 0, a negative or 1e39 (a float32 overflow), or a float
    weight set to NaN where the model has no Q/DQ."""
    graph = proto.graph
    scales = {n.input[1] for n in graph.node
              if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 1}
    floats = [t for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    pool = [t for t in floats if t.name in scales] or floats
    if not pool:
        return "noop"
    t = rng.choice(pool)
    try:
        values = onnx.numpy_helper.to_array(t).astype(np.float64)
    except ValueError:
        return "noop"
    if values.size == 0:
        return "noop"
    values.flat[rng.randrange(values.size)] = rng.choice(
        (float("nan"), float("inf"), 0.0, -0.5, 1e39))
    with np.errstate(over="ignore"):  # 1e39 is inf as a float32
        t.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), t.name))
    return f"bad scale in {t.name}"


def empty_output(proto: onnx.ModelProto, rng: random.Random) -> str:
    """A graph output made empty by a Slice whose step runs backwards from the start."""
    graph = proto.graph
    if not graph.output:
        return "noop"
    out = rng.choice(list(graph.output))
    producer = next((n for n in graph.node if out.name in n.output), None)
    if producer is None:
        return "noop"
    full = out.name + "_before_empty"
    producer.output[list(producer.output).index(out.name)] = full
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == out.name:
                node.input[i] = full
    consts = []
    for suffix, value in (("starts", 0), ("ends", 5), ("axes", -1), ("steps", -1)):
        consts.append(onnx.helper.make_tensor(f"{out.name}_{suffix}", onnx.TensorProto.INT64, [1],
                                              [value]))
    graph.initializer.extend(consts)
    graph.node.append(onnx.helper.make_node("Slice", [full, *(c.name for c in consts)],
                                            [out.name], name=out.name + "_empty"))
    out.type.tensor_type.ClearField("shape")
    return f"empty output {out.name}"


CASE_FILE = "model.onnx"  # the name benchmarks/fuzz_run.py gives the case: a region it holds


def shared_external(proto: onnx.ModelProto, rng: random.Random) -> str:
    """Initializers made external, all reading one region of the case's own file (its first
    bytes, or a few bytes in), and 1 to 300 more initializers on the same region that nothing
    reads: N references to one region, each materialized (the weights limit counts them)."""
    graph = proto.graph
    pool = [t for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT and t.dims]
    if not pool:
        return "noop"
    picked = rng.sample(pool, min(len(pool), rng.choice((1, 2, 5, len(pool)))))
    offset = rng.choice((0, 0, 4, 3))
    for t in picked:
        size = int(np.prod(t.dims)) * 4
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for key, value in (("location", CASE_FILE), ("offset", str(offset)),
                           ("length", str(size))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
    extra = rng.choice((0, 1, 300))
    for i in range(extra):
        copy = graph.initializer.add()
        copy.CopyFrom(picked[0])
        copy.name = f"{picked[0].name}_shared{i}"
    return f"{len(picked)} initializers + {extra} on one external region at {offset}"


STRUCTURED = (mutate_field, mutate_field, mutate_attribute, short_tensor, shadow_input,
              rename_collision, bad_dim, bad_scale, empty_output, shared_external)


def flip_bits(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """1 to 8 random bits flipped: a byte-level mutation of any format."""
    buf = bytearray(data)
    flips = rng.randint(1, 8)
    for _ in range(flips):
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf), f"flip {flips} bits"


def truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """The file cut at a random byte."""
    cut = rng.randrange(len(data))
    return data[:cut], f"truncate at {cut}/{len(data)}"


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One case: the mutated bytes and what was done."""
    kind = rng.random()
    if kind < 0.15:
        return flip_bits(data, rng)
    if kind < 0.25:
        return truncate(data, rng)
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    steps = [rng.choice(STRUCTURED)(proto, rng) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    return proto.SerializeToString(), "; ".join(steps)
