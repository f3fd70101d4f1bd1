"""Analysis precisions: bytes per element, the model's own precision, the target's check."""

from __future__ import annotations

import onnx_ir as ir

from opfuse.errors import OpfuseError
from opfuse.targets import Perf, Target

BYTES_PER_ELEMENT: dict[str, int] = {"fp32": 4, "fp16": 2, "int16": 2, "int8": 1}

_OF_DTYPE: dict[ir.DataType, str] = {
    ir.DataType.FLOAT: "fp32",
    ir.DataType.FLOAT16: "fp16",
    ir.DataType.INT16: "int16",
    ir.DataType.INT8: "int8",
    ir.DataType.UINT8: "int8",
}


def model_precision(model: ir.Model) -> str:
    """The precision of the model's first floating/quantized graph input ("fp32" if none says)."""
    for value in model.graph.inputs:
        if value.dtype in _OF_DTYPE:
            return _OF_DTYPE[value.dtype]
    return "fp32"


def require_perf(target: Target) -> Perf:
    if target.perf is None:
        raise OpfuseError(f"target '{target.name}' has no [perf] table, so its costs are unknown")
    return target.perf


def resolve_precision(model: ir.Model, target: Target, precision: str | None) -> str:
    """``precision`` checked against the target; None means the model's own precision, or the
    target's first precision when the target does not run the model's own."""
    if precision is None:
        own = model_precision(model)
        return own if own in target.precisions else target.precisions[0]
    if precision not in target.precisions or precision not in BYTES_PER_ELEMENT:
        supported = [p for p in target.precisions if p in BYTES_PER_ELEMENT]
        raise OpfuseError(
            f"unknown precision '{precision}' for target '{target.name}' "
            f"(it supports: {', '.join(supported)})"
        )
    return precision
