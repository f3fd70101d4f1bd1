"""Where a value lives in the generated C: the static arena (at the memory plan's offset) or the
weight blob in flash (weights.c), and the parameter list of one kernel function."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import const, who
from opfuse.errors import OpfuseError
from opfuse.memory import MemoryPlan

WEIGHT_ALIGN = 16  # floats (64 bytes): every weight starts on a cache line


class WeightBlob:
    """All constant float arrays, one after another (each 64-byte aligned), deduplicated by key."""

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []
        self.offsets: dict[str, int] = {}
        self.size = 0  # floats

    def add(self, key: str, array: np.ndarray) -> int:
        if key in self.offsets:
            return self.offsets[key]
        data = np.ascontiguousarray(array, dtype=np.float32).ravel()
        pad = -self.size % WEIGHT_ALIGN
        if pad:
            self.chunks.append(np.zeros(pad, np.float32))
        offset = self.size + pad
        self.chunks.append(data)
        self.size = offset + data.size
        self.offsets[key] = offset
        return offset

    def data(self) -> np.ndarray:
        if not self.chunks:
            return np.zeros(1, np.float32)
        return np.concatenate(self.chunks)


class Store:
    """Resolves values to C pointer expressions: ``A + k`` (arena) or ``W + k`` (weights)."""

    def __init__(self, plan: MemoryPlan, blob: WeightBlob) -> None:
        self.plan = plan
        self.blob = blob
        self.sizes = {t.name: t.size_bytes for t in plan.tensors}

    def is_arena(self, value: ir.Value) -> bool:
        return value.name in self.plan.offsets

    def where(self, value: ir.Value, node: ir.Node) -> str:
        arr = const(value)
        if arr is not None:
            if arr.dtype.kind not in "fiub":
                raise OpfuseError(f"C backend: {who(node)}: constant '{value.name}' is not numeric")
            return f"W + {self.blob.add(value.name, arr)}"
        if not self.is_arena(value):
            raise OpfuseError(
                f"C backend: {who(node)}: value '{value.name}' is neither a constant nor in the "
                "memory plan"
            )
        if value.dtype is not None and value.dtype != ir.DataType.FLOAT:
            raise OpfuseError(
                f"C backend: {who(node)}: '{value.name}' is {value.dtype.name}; the C backend "
                "emits float32 activations only"
            )
        offset = self.plan.offsets[value.name]
        if offset % 4:
            raise OpfuseError(f"C backend: arena offset of '{value.name}' is not float aligned")
        return f"A + {offset // 4}"

    def weight(self, key: str, array: np.ndarray) -> str:
        return f"W + {self.blob.add(key, array)}"


class Params:
    """The parameters of one kernel function and the matching call arguments."""

    def __init__(self, store: Store, restrict: bool = True) -> None:
        self.store = store
        self.restrict = " restrict" if restrict else ""
        self.decls: list[str] = []
        self.args: list[str] = []
        self.by_key: dict[str, str] = {}

    def _add(self, key: str, decl: str, arg: str) -> str:
        if key not in self.by_key:
            name = f"arg{len(self.decls)}"
            self.decls.append(decl.format(name=name))
            self.args.append(arg)
            self.by_key[key] = name
        return self.by_key[key]

    def inp(self, value: ir.Value, node: ir.Node) -> str:
        where = self.store.where(value, node)
        return self._add("in:" + value.name, f"const float *{self.restrict} {{name}}", where)

    def weight(self, key: str, array: np.ndarray) -> str:
        where = self.store.weight(key, array)
        return self._add("w:" + key, f"const float *{self.restrict} {{name}}", where)

    def out(self, value: ir.Value, node: ir.Node) -> str:
        where = self.store.where(value, node)
        if where.startswith("W"):
            raise OpfuseError(f"C backend: {who(node)}: output '{value.name}' is a constant")
        return self._add("out:" + value.name, f"float *{self.restrict} {{name}}", where)

    def signature(self, fname: str) -> str:
        return f"static void {fname}({', '.join(self.decls) or 'void'})"

    def call(self, fname: str) -> str:
        return f"{fname}({', '.join(self.args)});"
