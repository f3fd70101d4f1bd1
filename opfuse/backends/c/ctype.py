"""C types the generator emits: name, size and literal format flow through stores, parameters,
weights and epilogues (docs/architecture.md, "int8 in the IR"), so an int8 kernel is a sibling of
the float one rather than a branch in every template."""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from opfuse.backends.c.cgen import flit


@dataclass(frozen=True)
class CType:
    name: str  # the C type
    size: int  # bytes per element
    np_dtype: str  # little-endian numpy dtype of its bytes in weights.c
    lo: int | None = None  # integer range (None for float)
    hi: int | None = None

    @property
    def is_float(self) -> bool:
        return self.lo is None

    def lit(self, x: float | int) -> str:
        """A C literal of this type."""
        if self.is_float:
            return flit(float(x))
        v = int(x)
        if self.name == "int32_t" and v == -(1 << 31):
            return "(-2147483647 - 1)"
        if self.name == "int64_t":
            return "(-9223372036854775807LL - 1)" if v == -(1 << 63) else f"{v}LL"
        return str(v)


FLOAT = CType("float", 4, "<f4")
INT8 = CType("int8_t", 1, "i1", -128, 127)
UINT8 = CType("uint8_t", 1, "u1", 0, 255)
INT16 = CType("int16_t", 2, "<i2", -(1 << 15), (1 << 15) - 1)
INT32 = CType("int32_t", 4, "<i4", -(1 << 31), (1 << 31) - 1)
INT64 = CType("int64_t", 8, "<i8", -(1 << 63), (1 << 63) - 1)
# ONNX bool is one byte, 0 or 1 (numpy's bool_): a uint8_t in C, distinct from UINT8 by its range
BOOL = CType("uint8_t", 1, "u1", 0, 1)

_BY_DTYPE = {
    ir.DataType.FLOAT: FLOAT,
    ir.DataType.INT8: INT8,
    ir.DataType.UINT8: UINT8,
    ir.DataType.INT16: INT16,
    ir.DataType.INT32: INT32,
    ir.DataType.INT64: INT64,
    ir.DataType.BOOL: BOOL,
}


def ctype_of(value: ir.Value | None) -> CType | None:
    """The C type of ``value``'s elements (None when its dtype has none here)."""
    if value is None or value.dtype is None:
        return FLOAT if value is not None else None
    return _BY_DTYPE.get(value.dtype)
