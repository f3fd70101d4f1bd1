"""The fuzzer's mutations of a .tflite flatbuffer (benchmarks/fuzz.py runs them).

A flatbuffer is tables reached through 32-bit offsets: every table starts with a signed offset to
its vtable (a list of 16-bit field offsets), and vectors start with a 32-bit length. The mutations
aim at exactly those: bit flips, truncation, operator and tensor indices out of range, a field's
value (an offset or an option such as a stride) set to an edge value, a vtable pointing at its own
table or past the end, a vector length of two billion, quantization scales of 0, inf or NaN, and
shared constants: tensors reading one buffer, tensors-vector entries naming one tensor.

The sites are found by walking the model with the ``tflite`` package's generated readers (the
schema's structure), so a mutation hits a real table rather than a weight byte. Every choice draws
from the ``random.Random`` it is given, so a case is reproduced from its seed.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from benchmarks.fuzz_mutations import flip_bits, truncate

EDGE_INT32 = (0, -1, 1, 2, -2, 7, 127, 128, 255, 65535, 2**31 - 1, -(2**31), 2**24)
EDGE_FLOAT32 = (0.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e-45, 3.4e38, -3.4e38)


@dataclass(frozen=True)
class Sites:
    """Byte positions in one model, by what they hold."""

    tables: tuple[int, ...]  # the start of a table (its soffset to the vtable)
    fields: tuple[int, ...]  # a scalar or offset field of any table
    options: tuple[int, ...]  # a field of an operator's builtin options table
    indices: tuple[int, ...]  # an int32 tensor / opcode / buffer index
    vectors: tuple[int, ...]  # the length word of a vector
    scales: tuple[int, ...]  # a float32 quantization scale
    buffer_fields: tuple[tuple[int, int], ...] = ()  # (position, value) of a tensor's buffer
    tensor_slots: tuple[tuple[int, int], ...] = ()  # (position, table) of a tensors-vector entry


def _fields(tab) -> list[int]:
    """Positions of the fields a table's vtable lists."""
    vtable = tab.Pos - struct.unpack_from("<i", tab.Bytes, tab.Pos)[0]
    size = struct.unpack_from("<H", tab.Bytes, vtable)[0]
    out = []
    for slot in range(4, size, 2):
        off = struct.unpack_from("<H", tab.Bytes, vtable + slot)[0]
        if off:
            out.append(tab.Pos + off)
    return out


def _vector(tab, slot: int) -> tuple[int, int] | None:
    """(position of the length word, length) of the vector in ``slot``, if present."""
    o = tab.Offset(slot)
    if not o:
        return None
    start = tab.Vector(o)
    return start - 4, tab.VectorLen(o)


def find_sites(data: bytes) -> Sites:
    import tflite

    model = tflite.Model.GetRootAsModel(data, 0)
    tables, fields, options, indices, vectors, scales = [], [], [], [], [], []
    buffer_fields, tensor_slots = [], []

    def table(obj) -> None:
        tables.append(obj._tab.Pos)
        fields.extend(_fields(obj._tab))

    def ints(obj, slot: int) -> None:
        vec = _vector(obj._tab, slot)
        if vec is not None:
            vectors.append(vec[0])
            indices.extend(vec[0] + 4 + 4 * i for i in range(vec[1]))

    table(model)
    for i in range(model.OperatorCodesLength()):
        table(model.OperatorCodes(i))
    for i in range(model.BuffersLength()):
        table(model.Buffers(i))
        vec = _vector(model.Buffers(i)._tab, 4)
        if vec is not None:
            vectors.append(vec[0])
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        table(graph)
        ints(graph, 6)  # inputs
        ints(graph, 8)  # outputs
        vec = _vector(graph._tab, 4)  # tensors: uoffsets, each relative to its own position
        for i in range(graph.TensorsLength()):
            t = graph.Tensors(i)
            table(t)
            if vec is not None:
                tensor_slots.append((vec[0] + 4 + 4 * i, t._tab.Pos))
            if t._tab.Offset(8):  # buffer
                buffer_fields.append((t._tab.Pos + t._tab.Offset(8), t.Buffer()))
            ints(t, 4)  # shape
            q = t.Quantization()
            if q is not None:
                table(q)
                vec = _vector(q._tab, 8)  # scale
                if vec is not None:
                    vectors.append(vec[0])
                    scales.extend(vec[0] + 4 + 4 * k for k in range(vec[1]))
        for k in range(graph.OperatorsLength()):
            op = graph.Operators(k)
            table(op)
            ints(op, 6)  # inputs
            ints(op, 8)  # outputs
            opts = op.BuiltinOptions()
            if opts is not None:
                tables.append(opts.Pos)
                options.extend(_fields(opts))
    return Sites(*(tuple(x) for x in (tables, fields, options, indices, vectors, scales,
                                       buffer_fields, tensor_slots)))


def _put_i32(buf: bytearray, pos: int, value: int) -> None:
    if 0 <= pos <= len(buf) - 4:
        struct.pack_into("<i", buf, pos, value)


def _index(buf: bytearray, sites: Sites, rng: random.Random) -> str:
    if not sites.indices:
        return "noop"
    pos = rng.choice(sites.indices)
    old = struct.unpack_from("<i", buf, pos)[0]
    value = rng.choice((-1, -2, old + 1, old + 1000, 2**31 - 1, -(2**31), 65536))
    _put_i32(buf, pos, value)
    return f"index at {pos} {old} -> {value}"


def _field(buf: bytearray, sites: Sites, rng: random.Random, where: str) -> str:
    pool = sites.options if where == "option" and sites.options else sites.fields
    if not pool:
        return "noop"
    pos = rng.choice(pool)
    width = rng.choice((1, 4, 4))
    if width == 1:
        value = rng.choice((0, 255, 128, 1, 2))
        buf[pos] = value
    elif rng.random() < 0.2:
        value = rng.choice(EDGE_FLOAT32)
        if pos <= len(buf) - 4:
            struct.pack_into("<f", buf, pos, value)
    else:
        value = rng.choice(EDGE_INT32)
        _put_i32(buf, pos, value)
    return f"{where} field at {pos} = {value}"


def _vtable(buf: bytearray, sites: Sites, rng: random.Random) -> str:
    """A table's vtable offset: 0 (the table is its own vtable), just before it, or past the end."""
    if not sites.tables:
        return "noop"
    pos = rng.choice(sites.tables)
    value = rng.choice((0, 2, -4, -len(buf), 2**31 - 1, -(2**31), pos + 1))
    _put_i32(buf, pos, value)
    return f"vtable of table at {pos} = {value}"


def _length(buf: bytearray, sites: Sites, rng: random.Random) -> str:
    if not sites.vectors:
        return "noop"
    pos = rng.choice(sites.vectors)
    old = struct.unpack_from("<i", buf, pos)[0]
    value = rng.choice((2**31 - 1, -1, old + 1, old * 2 + 1, len(buf), 0))
    _put_i32(buf, pos, value)
    return f"vector length at {pos} {old} -> {value}"


def _scale(buf: bytearray, sites: Sites, rng: random.Random) -> str:
    if not sites.scales:
        return "noop"
    pos = rng.choice(sites.scales)
    value = rng.choice(EDGE_FLOAT32)
    struct.pack_into("<f", buf, pos, value)
    return f"scale at {pos} = {value}"


def share_buffer(buf: bytearray, sites: Sites, rng: random.Random) -> str:
    """1, 3 or every other constant tensor reads one constant's buffer (as the converter's
    deduplicated buffers do, here also where sizes differ)."""
    consts = [site for site in sites.buffer_fields if site[1] > 0]
    if len(consts) < 2:
        return "noop"
    _, shared = rng.choice(consts)
    others = [pos for pos, value in consts if value != shared]
    picked = rng.sample(others, min(len(others), rng.choice((1, 3, len(others)))))
    for pos in picked:
        _put_i32(buf, pos, shared)
    return f"{len(picked)} tensors share buffer {shared}"


def repeat_tensor(buf: bytearray, sites: Sites, rng: random.Random) -> str:
    """Entries of the tensors vector pointing at one tensor's table: 1, 3 or every entry, so one
    constant (and its buffer) is decoded once per entry."""
    if len(sites.tensor_slots) < 2:
        return "noop"
    _, target = rng.choice(sites.tensor_slots)
    picked = rng.sample(sites.tensor_slots, min(len(sites.tensor_slots),
                                                rng.choice((1, 3, len(sites.tensor_slots)))))
    for pos, _ in picked:
        _put_i32(buf, pos, target - pos)
    return f"{len(picked)} tensors-vector entries -> the table at {target}"


def mutate_tflite(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One case: the mutated bytes and what was done."""
    kind = rng.random()
    if kind < 0.12:
        return flip_bits(data, rng)
    if kind < 0.2:
        return truncate(data, rng)
    sites = find_sites(data)
    buf = bytearray(data)
    steps = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        pick = rng.random()
        if pick < 0.25:
            steps.append(_index(buf, sites, rng))
        elif pick < 0.5:
            steps.append(_field(buf, sites, rng, "option"))
        elif pick < 0.65:
            steps.append(_field(buf, sites, rng, "table"))
        elif pick < 0.75:
            steps.append(_vtable(buf, sites, rng))
        elif pick < 0.82:
            steps.append(_length(buf, sites, rng))
        elif pick < 0.9:
            steps.append(_scale(buf, sites, rng))
        elif pick < 0.95:
            steps.append(share_buffer(buf, sites, rng))
        else:
            steps.append(repeat_tensor(buf, sites, rng))
    return bytes(buf), "; ".join(steps)
