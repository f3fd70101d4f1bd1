"""Where a value lives in the generated C: the static arena (at the memory plan's offset) or the
weight blob in flash (weights.c), and the parameter list of one kernel function."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import dims, who
from opfuse.backends.c.ctype import BOOL, FLOAT, INT64, CType, ctype_of
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.memory import MemoryPlan
from opfuse.targets.isa import PORTABLE, Isa

if TYPE_CHECKING:
    from opfuse.backends.c.int8.mcu_tiles import RowTails

WEIGHT_ALIGN = 64  # bytes: on the host every weight starts on a cache line
# On a Cortex-M board flash has no cache line to start on (the M4 has no cache, the M7's lines are
# 32 bytes and its kernels read weights as words): 8 keeps every array word- and LDRD-aligned, and
# 64 cost up to 63 bytes of padding per array (4 arrays per conv: about 1.5% of vww_96_int8's flash).
MCU_WEIGHT_ALIGN = 8


class WeightBlob:
    """All constant arrays, one after another (each ``align``-byte aligned), deduplicated by key.

    Offsets are in bytes; float arrays are read through ``opfuse_weights.f`` (offset / 4) and
    arrays of any other C type through a typed pointer at their byte offset."""

    def __init__(self, align: int = WEIGHT_ALIGN) -> None:
        self.align = align
        self.chunks: list[bytes] = []
        self.offsets: dict[str, int] = {}
        self.nbytes = 0

    def add_bytes(self, key: str, array: np.ndarray, ctype: CType = FLOAT) -> int:
        """Byte offset of ``array`` stored as ``ctype`` (little-endian)."""
        if key in self.offsets:
            return self.offsets[key]
        data = np.ascontiguousarray(array).astype(ctype.np_dtype).ravel().tobytes()
        pad = -self.nbytes % self.align
        if pad:
            self.chunks.append(bytes(pad))
        offset = self.nbytes + pad
        self.chunks.append(data)
        self.nbytes = offset + len(data)
        self.offsets[key] = offset
        return offset

    def add(self, key: str, array: np.ndarray) -> int:
        """Float index of ``array`` stored as float32."""
        return self.add_bytes(key, array, FLOAT) // 4

    @property
    def size(self) -> int:
        """Size in floats (rounded up)."""
        return -(-self.nbytes // 4)

    def data(self) -> bytes:
        raw = b"".join(self.chunks)
        return raw + bytes(-len(raw) % 4) if raw else bytes(4)


class Store:
    """Resolves values to C pointer expressions: ``A + k`` (arena) or ``W + k`` (weights)."""

    def __init__(self, plan: MemoryPlan, blob: WeightBlob, rounding: str = "tflite",
                 isa: Isa = PORTABLE, narrow_constants: bool = False) -> None:
        self.plan = plan
        self.isa = isa  # what the kernels are tiled for (opfuse/targets/isa.py)
        # constants in an MCU's flash: the narrowest C types that hold them (int8/common.py)
        self.narrow_constants = narrow_constants
        self.step: int | None = None  # the kernel being emitted (its step in the memory plan)
        # arena bytes the cascades save over layer by layer: stack scratch a cascade member may
        # spend to keep the matrix core's full tile (int8/mcu_tiles.py)
        self.cascade_saving = 0
        # whether and with what stack a cascade row may end in a narrower tile (emit.generate)
        self.row_tails: RowTails | None = None
        self.rounding = rounding  # int8 semantics: "tflite" or "onnx" (opfuse.quant.ROUNDING)
        self.blob = blob
        self.sizes = {t.name: t.size_bytes for t in plan.tensors}

    def is_arena(self, value: ir.Value) -> bool:
        return value.name in self.plan.offsets

    def where(self, value: ir.Value, node: ir.Node, ctype: CType | None = None) -> str:
        """Pointer expression of ``value``: float values as ``A + k`` / ``W + k`` (float index),
        other C types as a typed pointer at the byte offset. A constant is stored as ``ctype``
        (float32 by default)."""
        arr = const(value)
        if arr is not None:
            if arr.dtype.kind not in "fiub":
                raise OpfuseError(f"C backend: {who(node)}: constant '{value.name}' is not numeric")
            return self.weight(value.name, arr, ctype or FLOAT)
        if not self.is_arena(value):
            raise OpfuseError(
                f"C backend: {who(node)}: value '{value.name}' is neither a constant nor in the "
                "memory plan"
            )
        ct = ctype_of(value)
        if ct is None:
            raise OpfuseError(
                f"C backend: {who(node)}: '{value.name}' is {value.dtype.name}; the C backend "
                "emits float32, int8, uint8 and int32 activations only"
            )
        offset = self.plan.offsets[value.name]
        if ct is FLOAT:
            if offset % 4:
                raise OpfuseError(f"C backend: arena offset of '{value.name}' is not float aligned")
            return f"A + {offset // 4}"
        return f"({ct.name} *)(AB + {offset})"

    def weight(self, key: str, array: np.ndarray, ctype: CType = FLOAT) -> str:
        if ctype is FLOAT:
            return f"W + {self.blob.add(key, array)}"
        return f"(const {ctype.name} *)(WB + {self.blob.add_bytes(key + ':' + ctype.name, array, ctype)})"


class Params:
    """The parameters of one kernel function and the matching call arguments."""

    def __init__(self, store: Store, restrict: bool = True) -> None:
        self.store = store
        self.restrict = " restrict" if restrict else ""
        self.decls: list[str] = []
        self.args: list[str] = []
        self.by_key: dict[str, str] = {}
        self.locals: dict[str, str] = {}  # value -> a stack array of the kernel body (``local``)

    def local(self, w, value: ir.Value, node: ir.Node) -> str:  # noqa: ANN001
        """Declare ``value`` (float32, static shape) as a stack array of the kernel body: a small
        intermediate inside a kernel that still has to be read at other indices than written (an
        anchor's result that a later member broadcasts up to a larger shape)."""
        name = f"t{len(self.locals)}"
        w(f"float {name}[{math.prod(dims(value, node))}];")
        self.locals[value.name] = name
        return name

    def _add(self, key: str, decl: str, arg: str) -> str:
        if key not in self.by_key:
            name = f"arg{len(self.decls)}"
            self.decls.append(decl.format(name=name))
            self.args.append(arg)
            self.by_key[key] = name
        return self.by_key[key]

    def inp(self, value: ir.Value, node: ir.Node, ctype: CType | None = None) -> str:
        """A read-only parameter for ``value`` (a constant is stored as ``ctype``, float32 by
        default; an arena value has its own C type)."""
        if value.name in self.locals:
            return self.locals[value.name]
        if ctype is None and ctype_of(value) in (INT64, BOOL) and const(value) is not None:
            ctype = ctype_of(value)  # an index or mask constant keeps its type (never a float)
        where = self.store.where(value, node, ctype)
        ct = ctype if const(value) is not None else ctype_of(value)
        name = (ct or FLOAT).name
        key = "in:" + value.name + ("" if ct in (None, FLOAT) else ":" + name)
        return self._add(key, f"const {name} *{self.restrict} {{name}}", where)

    def weight(self, key: str, array: np.ndarray, ctype: CType = FLOAT) -> str:
        where = self.store.weight(key, array, ctype)
        wkey = "w:" + key + ("" if ctype is FLOAT else ":" + ctype.name)
        return self._add(wkey, f"const {ctype.name} *{self.restrict} {{name}}", where)

    def out(self, value: ir.Value, node: ir.Node) -> str:
        if value.name in self.locals:
            return self.locals[value.name]
        where = self.store.where(value, node)
        if where.startswith("W") or where.startswith("(const"):
            raise OpfuseError(f"C backend: {who(node)}: output '{value.name}' is a constant")
        name = (ctype_of(value) or FLOAT).name
        return self._add("out:" + value.name, f"{name} *{self.restrict} {{name}}", where)

    def signature(self, fname: str) -> str:
        return f"static void {fname}({', '.join(self.decls) or 'void'})"

    def call(self, fname: str) -> str:
        return f"{fname}({', '.join(self.args)});"
