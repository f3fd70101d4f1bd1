"""Analysis precisions: bytes per element, the model's own precision, the target's check."""

from __future__ import annotations

import onnx_ir as ir

from opfuse.errors import OpfuseError
from opfuse.quant import get_quant, is_quantized
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
    """The precision of the model's first floating/quantized graph input ("fp32" if none says);
    a quantized model (docs/architecture.md, "int8 in the IR") runs at its activations' width."""
    if is_quantized(model):
        return "int16" if _has_int16_activations(model) else "int8"
    for value in model.graph.inputs:
        if value.dtype in _OF_DTYPE:
            return _OF_DTYPE[value.dtype]
    return "fp32"


def _has_int16_activations(model: ir.Model) -> bool:
    return any(
        get_quant(v) is not None and v.dtype in (ir.DataType.INT16, ir.DataType.UINT16)
        for node in model.graph
        for v in node.outputs
    )


def element_bytes(model: ir.Model, precision: str) -> int | None:
    """Bytes per element of the model's floating-point tensors at ``precision``, or None when the
    model is quantized: its own dtypes (int8 activations and weights, int32 bias, float where it
    stays float) are what it moves, whatever precision is asked."""
    return None if is_quantized(model) else BYTES_PER_ELEMENT[precision]


def precision_note(model: ir.Model, asked: str | None, used: str) -> str:
    """One sentence on where the precision comes from, "" when it is simply the model's own."""
    own = model_precision(model)
    if is_quantized(model):
        notes = []
        if asked is not None and asked != own:
            notes.append(f"--precision {asked} ignored: a quantized model is costed at its own dtypes")
        if used != own:
            notes.append(f"the target has no {own} rate, so its {used} rate is used")
        return "; ".join(notes)
    if used != own:
        return f"what-if: the model stores {own}; its float tensors are counted at {used}"
    return ""


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
