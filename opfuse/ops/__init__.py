"""The op registry (docs/architecture.md, "Op registry"): ``table`` holds one entry per op,
``groups`` the sets other stages derive from it, ``formulas`` the MAC/FLOP formulas."""

from __future__ import annotations

from opfuse.ops import groups
from opfuse.ops.formulas import numel
from opfuse.ops.table import (
    ACTIVATION,
    ARITH,
    CLAMP,
    FLOAT_FAMILIES,
    INT8_FAMILIES,
    OPS,
    TAGS,
    OpInfo,
    OpKind,
    flops,
    is_anchor,
    kind,
    macs,
    op_info,
)

__all__ = [
    "ACTIVATION",
    "ARITH",
    "CLAMP",
    "FLOAT_FAMILIES",
    "INT8_FAMILIES",
    "OPS",
    "TAGS",
    "OpInfo",
    "OpKind",
    "flops",
    "groups",
    "is_anchor",
    "kind",
    "macs",
    "numel",
    "op_info",
]
