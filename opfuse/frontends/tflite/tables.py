"""Decode a TFLite operator's option table and a tensor's sparsity table at read time, into plain
values (docs/architecture.md, "Layout of TFLite models").

The ``tflite`` package reads a flatbuffer lazily: every accessor follows offsets when it is called,
so a corrupt offset would raise ``struct.error`` or ``IndexError`` wherever an importer, a fold or
the C backend first asks. Decoding every field once inside the reader's error handling turns that
into one line naming the operator, and what later stages see can no longer fail to read.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

_SKIP_PREFIXES = ("Init", "GetRootAs")
_SKIP_SUFFIXES = ("IsNone", "BufferHasIdentifier", "Length")


@dataclass(frozen=True)
class Options:
    """A builtin options table with the generated accessors' names (``o.StrideH()``) returning
    values decoded once; an accessor the table does not have raises AttributeError as before."""

    kind: str  # the table's name, e.g. Conv2DOptions
    values: Mapping[str, object]

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("kind", "values"):
            raise AttributeError(name)
        values = self.values
        if name not in values:
            raise AttributeError(f"{self.kind} has no field {name}")
        return lambda: values[name]


def _accessors(cls: type) -> list[tuple[str, int]]:
    """(name, number of arguments besides self) of the generated field accessors of ``cls``."""
    out = []
    for name, fn in vars(cls).items():
        if not callable(fn) or name.startswith("_") or name.startswith(_SKIP_PREFIXES) \
                or name.endswith(_SKIP_SUFFIXES):
            continue
        out.append((name, len(inspect.signature(fn).parameters) - 1))
    return out


def decode_options(kind: str, table) -> Options:
    """Every field of the options table ``table`` (a flatbuffers Table) read now. Vectors are read
    whole: ``o.XAsNumpy()`` gives one; the element accessor ``o.X(j)`` is not kept."""
    import tflite

    cls = getattr(tflite, kind, None)
    if cls is None:  # a table newer than the tflite package: no importer reads it
        return Options(kind, {})
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    names = {name for name, _ in _accessors(cls)}
    values: dict[str, object] = {}
    for name, args in _accessors(cls):
        if args == 0 and not name.endswith("AsNumpy"):
            value = getattr(obj, name)()
            if hasattr(value, "Bytes"):  # a sub-table or union: no importer reads one
                continue
            values[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        elif args == 0:  # XAsNumpy: the whole vector, or 0 when it is absent
            base = name[: -len("AsNumpy")]
            length = getattr(obj, f"{base}Length")()
            values[name] = np.array(getattr(obj, name)()) if length else np.zeros(0)
        elif args == 1 and f"{name}AsNumpy" not in names:  # a vector of strings or tables
            items = [getattr(obj, name)(j) for j in range(getattr(obj, f"{name}Length")())]
            if not any(hasattr(item, "Bytes") or hasattr(item, "_tab") for item in items):
                values[f"{name}List"] = tuple(items)
    return Options(kind, values)


@dataclass(frozen=True)
class Level:
    """One dimension of TFLite's sparse format: DENSE (``dense_size``) or SPARSE_CSR
    (``segments`` and ``indices``)."""

    dense: bool
    dense_size: int
    segments: np.ndarray  # int64
    indices: np.ndarray  # int64


@dataclass(frozen=True)
class Sparsity:
    traversal_order: tuple[int, ...]
    block_map: tuple[int, ...]
    levels: tuple[Level, ...]


def decode_sparsity(params) -> Sparsity:
    """A SparsityParameters table read whole (its index vectors are unions of three int types)."""
    import tflite
    from tflite.SparseIndexVector import SparseIndexVector as Kind

    classes = {Kind.Int32Vector: tflite.Int32Vector, Kind.Uint16Vector: tflite.Uint16Vector,
               Kind.Uint8Vector: tflite.Uint8Vector}

    def vector(kind: int, table) -> np.ndarray:
        if table is None or kind not in classes:
            return np.zeros(0, np.int64)
        vec = classes[kind]()
        vec.Init(table.Bytes, table.Pos)
        return vec.ValuesAsNumpy().astype(np.int64) if vec.ValuesLength() else np.zeros(0, np.int64)

    levels = []
    for i in range(params.DimMetadataLength()):
        md = params.DimMetadata(i)
        levels.append(Level(
            dense=md.Format() == 0, dense_size=int(md.DenseSize()),
            segments=vector(md.ArraySegmentsType(), md.ArraySegments()),
            indices=vector(md.ArrayIndicesType(), md.ArrayIndices()),
        ))
    order = tuple(int(i) for i in params.TraversalOrderAsNumpy()) \
        if params.TraversalOrderLength() else ()
    block = tuple(int(i) for i in params.BlockMapAsNumpy()) if params.BlockMapLength() else ()
    return Sparsity(order, block, tuple(levels))
