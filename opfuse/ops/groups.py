"""Queries over the op registry: every op set another stage needs, derived from ``OPS`` rather
than copied (docs/architecture.md, "Op registry"). Each name below is the one set of its kind;
``tests/test_op_registry.py`` holds every module's sets to these."""

from __future__ import annotations

from opfuse.ops.table import (
    ANCHOR_K,
    BINARY_K,
    CLAMP,
    CLAMP_K,
    EXPR,
    LUT,
    OPS,
    POOL_K,
    REDUCE_K,
    SOFTMAX,
    TYPED,
    OpKind,
)


def tagged(*tags: str) -> frozenset[str]:
    """Ops carrying any of ``tags``."""
    return frozenset(op for op, info in OPS.items() if info.tags & set(tags))


def of_kind(*kinds: OpKind) -> frozenset[str]:
    return frozenset(op for op, info in OPS.items() if info.kind in kinds)


def epilogue_class(cls: str) -> frozenset[str]:
    return frozenset(op for op, info in OPS.items() if info.epilogue == cls)


def c_float(*families: str) -> frozenset[str]:
    """Ops whose float C kernel is of one of ``families`` when they head a kernel."""
    return frozenset(op for op, info in OPS.items() if info.c in families)


def c_int8(*families: str) -> frozenset[str]:
    return frozenset(op for op, info in OPS.items() if info.c8 in families)


def dtypes(op: str) -> tuple[str, ...]:
    """The activation dtypes the C backend writes ``op`` in."""
    info = OPS.get(op)
    if info is None:
        return ()
    return tuple(d for d, has in (("float32", info.c), ("int8", info.c8)) if has)


ANCHORS = of_kind(OpKind.ANCHOR)
POOLS = tagged("pool")  # windowed: MaxPool, AveragePool
GLOBAL_POOLS = tagged("global_pool")
ALL_POOLS = POOLS | GLOBAL_POOLS
WINDOWED = tagged("windowed")  # the ops a cascade stage's window is composed of
VIEWS = tagged("view")
NPU_FREE = VIEWS | tagged("addressed")
REDUCTIONS = tagged("reduction")
POOL_REDUCES = tagged("pool_reduce")
CONVERSIONS = tagged("conversion")
MATRIX = tagged("matrix")
CLAMPS = epilogue_class(CLAMP)
QUANTIZABLE = tagged("quantizable")
QUANT_PASS = tagged("quant_pass")
ROW_NORMS = tagged("row_norm")  # LayerNorm, RMSNorm: the norms an Add or a MatMul kernel ends with
INTEGER_OPS = tagged("integer")
LOGIC = tagged("logic")

# The C backend's coverage
C_ANCHORS = c_float(ANCHOR_K)
C_POOLS = c_float(POOL_K)
C_REDUCE = c_float(REDUCE_K)
C_SOFTMAX = c_float(SOFTMAX)
C_EXPRS = c_float(EXPR) | frozenset(op for op, info in OPS.items() if info.c_expr)
C_INT8_ANCHORS = c_int8(ANCHOR_K)
C_INT8_POOLS = c_int8(POOL_K)
C_INT8_CHAIN = c_int8(CLAMP_K, BINARY_K, LUT)  # what an int8 epilogue chain applies
C_INT8_CLAMPS = c_int8(CLAMP_K)
C_INT8_BINARY = c_int8(BINARY_K)
C_INT8_LUT = c_int8(LUT)
C_TYPED = c_float(TYPED)
C_CASCADE = frozenset(op for op, info in OPS.items() if info.cascade)
