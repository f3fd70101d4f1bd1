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
# key in an LSTM node's metadata_props: the int16 cell state's scale of TFLite's int8
# UNIDIRECTIONAL_SEQUENCE_LSTM, which no ONNX input carries (frontends/tflite/ops_lstm.py)
LSTM_CELL_SCALE = "opfuse.lstm_cell_scale"
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


# --- requantization arithmetic, computed once per op at generation time (as TFLite's Prepare) ---


def round_away(x: float) -> int:
    """Round half away from zero (C's round / TfLiteRound)."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def multipliers(real) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (multiplier, shift) int32 arrays of real multipliers (float64)."""
    pairs = [quantize_multiplier(float(r)) for r in np.atleast_1d(np.asarray(real, np.float64))]
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32))


def conv_scales(x: QuantParams, w: QuantParams, y: QuantParams, channels: int,
                rounding: str = TFLITE) -> np.ndarray:
    """Real multipliers of an accumulator, one per output channel: s_x * s_w[c] / s_y.

    TFLite computes them in double from the float32 scales; onnxruntime in float32."""
    ws = np.broadcast_to(w.scale, (channels,)) if w.scale.size == 1 else w.scale
    if rounding == ONNX:
        return (np.float32(x.scale[0]) * ws.astype(np.float32) / np.float32(y.scale[0])).astype(
            np.float32)
    return np.float64(x.scale[0]) * ws.astype(np.float64) / np.float64(y.scale[0])


def quantize_real(f: float, q: QuantParams, rounding: str = TFLITE) -> int:
    """The integer of real ``f`` under per-tensor ``q`` (not saturated): TFLite rounds
    f / scale (float32) half away from zero; ONNX rounds half to even."""
    r = float(np.float32(f) / np.float32(q.scale[0]))
    return (round_away(r) if rounding == TFLITE else int(np.rint(r))) + int(q.zero_point[0])


def activation_range(q: QuantParams, lo: float | None, hi: float | None, qmin: int, qmax: int,
                     rounding: str = TFLITE) -> tuple[int, int]:
    """The integer clamp of a real range [lo, hi] (None: open), as TFLite's
    CalculateActivationRangeQuantized: each bound quantized, then intersected with the type."""
    a, b = qmin, qmax
    if lo is not None:
        a = max(a, quantize_real(lo, q, rounding))
    if hi is not None:
        b = min(b, quantize_real(hi, q, rounding))
    return a, b


def add_params(s1: float, s2: float, so: float, left_shift: int = 20) -> dict:
    """TFLite's int8 ADD/SUB rescaling: both inputs to twice the larger scale with ``left_shift``
    bits of headroom, then one output multiplier (all shifts <= 0)."""
    twice = 2.0 * max(float(s1), float(s2))
    m1, sh1 = quantize_multiplier(float(s1) / twice)
    m2, sh2 = quantize_multiplier(float(s2) / twice)
    mo, sho = quantize_multiplier(twice / ((1 << left_shift) * float(so)))
    return {"left_shift": left_shift, "m1": m1, "s1": sh1, "m2": m2, "s2": sh2,
            "mo": mo, "so": sho}


def mean_multiplier(s_in: float, s_out: float, count: int) -> tuple[int, int]:
    """TFLite's int8 MEAN: QuantizeMultiplier(s_in / s_out), then 1/count folded into it."""
    m, s = quantize_multiplier(float(s_in) / float(s_out))
    shift = count.bit_length() - 1
    shift = min(shift, 32, 31 + s)
    return int((m << shift) // count), s - shift


def softmax_params(beta: float, input_scale: float, integer_bits: int = 5) -> tuple[int, int, int]:
    """(input multiplier, left shift, diff_min) of TFLite's int8 softmax (double rounding)."""
    real = min(beta * float(input_scale) * (1 << (31 - integer_bits)), (1 << 31) - 1.0)
    m, shift = quantize_multiplier(real)
    radius = math.floor(((1 << integer_bits) - 1) * (1 << (31 - integer_bits)) / (1 << shift))
    return m, shift, -radius
