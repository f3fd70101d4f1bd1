"""Quantization parameters on tensors, and the requantization arithmetic, in one place.

How a quantized model lives in the IR (docs/architecture.md, "int8 in the IR"):

- Frontends hand the importer QDQ ONNX: ``DequantizeLinear -> float op -> QuantizeLinear``. The
  TFLite frontend writes that form too. The importer folds every QDQ group into the float op
  itself: the op keeps its ONNX ``op_type`` (Conv, Gemm, Add, Relu, Softmax...), its activation
  inputs and outputs become int8/uint8 values, its weights int8 initializers and its bias an int32
  initializer, and each of those values carries a :class:`QuantParams` in ``value.meta[QUANT]``.
  So ``DQ -> op -> Q`` is one node, and the partitioner sees the same Conv -> Relu structure as
  in a float model.
- A clamp activation between an anchor and its Q (Conv -> Relu -> Q) gets the Q's parameters on
  both sides: in the integer domain it is then exactly the requantization clamp of the anchor.
- ``model.meta[ROUNDING]`` (and the proto's ``metadata_props`` of the same key) says whose
  integer semantics the model has: ``"tflite"`` (fixed-point multiplier and shift, as TFLite
  Micro's reference kernels) or ``"onnx"`` (float scale, round half to even).
- Emitting ONNX expands every annotated value back into QDQ, which onnxruntime runs.

The multiplier arithmetic mirrors the published definition of TFLite's ``QuantizeMultiplier``
(frexp of the real multiplier, a Q31 mantissa rounded half away from zero, and an exponent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

QUANT = "opfuse.quant"  # key in onnx_ir Value.meta
ROUNDING = "opfuse.rounding"  # key in Model.meta and in the proto's metadata_props
TFLITE = "tflite"
ONNX = "onnx"


@dataclass(frozen=True, eq=False)
class QuantParams:
    """real = scale * (q - zero_point); per tensor (one scale) or per channel along ``axis``."""

    scale: np.ndarray  # float32, shape (1,) or (C,)
    zero_point: np.ndarray  # int32, same shape as scale
    axis: int | None = None  # None: per tensor

    @property
    def per_channel(self) -> bool:
        return self.axis is not None and self.scale.size > 1

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, QuantParams)
            and self.axis == other.axis
            and np.array_equal(self.scale, other.scale)
            and np.array_equal(self.zero_point, other.zero_point)
        )

    def __hash__(self) -> int:
        return hash((self.axis, self.scale.tobytes(), self.zero_point.tobytes()))


def make_params(scale, zero_point=0, axis: int | None = None) -> QuantParams:
    s = np.atleast_1d(np.asarray(scale, dtype=np.float32)).ravel()
    z = np.atleast_1d(np.asarray(zero_point, dtype=np.int64)).ravel().astype(np.int32)
    if z.size == 1 and s.size > 1:
        z = np.full(s.shape, int(z[0]), dtype=np.int32)
    return QuantParams(s, z, axis if s.size > 1 else None)


def get_quant(value) -> QuantParams | None:
    """The value's quantization parameters, or None for a float (or unquantized int) value."""
    if value is None:
        return None
    return value.meta.get(QUANT)


def is_quantized(model) -> bool:
    """Whether any value of ``model``'s main graph carries QuantParams."""
    graph = model.graph
    if any(QUANT in v.meta for v in (*graph.inputs, *graph.initializers.values())):
        return True
    return any(QUANT in v.meta for node in graph for v in node.outputs)


def set_quant(value, params: QuantParams | None) -> None:
    if params is None:
        value.meta.pop(QUANT, None)
    else:
        value.meta[QUANT] = params


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(multiplier, shift) with real ~= multiplier * 2**(shift - 31); multiplier a Q31 in [2**30, 2**31).

    Same arithmetic as TFLite's QuantizeMultiplier: frexp, round half away from zero, renormalize
    a mantissa that rounded up to 2**31, and flush a shift below -31 to zero."""
    if real == 0.0:
        return 0, 0
    mantissa, shift = math.frexp(real)
    q = int(math.floor(abs(mantissa) * (1 << 31) + 0.5)) * (1 if mantissa > 0 else -1)
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, shift
