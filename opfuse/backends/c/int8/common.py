"""What every int8 kernel needs: a value's quantization parameters and C type, the rounding mode,
and the requantization call in that mode (docs/architecture.md, "int8 in the IR")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import flit, who
from opfuse.backends.c.ctype import FLOAT, INT8, INT32, CType, ctype_of
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.quant import ONNX, TFLITE, QuantParams, get_quant, multipliers


def quant(value: ir.Value | None, node: ir.Node, what: str = "") -> QuantParams:
    """``value``'s quantization parameters; an int8 kernel without them is a bad graph."""
    q = get_quant(value) if value is not None else None
    if q is None:
        name = "an omitted input" if value is None else f"'{value.name}'"
        raise OpfuseError(
            f"C backend: {who(node)}: {what or 'value'} {name} has no quantization parameters"
        )
    return q


def conv_operands(node: ir.Node) -> tuple[np.ndarray, QuantParams, QuantParams, QuantParams]:
    """An int8 Conv's or ConvTranspose's constant weights and the input's, weights' and output's
    quantization, refused (naming the node and its op) where no int8 kernel takes them: weights
    that are not constant or have a nonzero zero point, activations quantized per channel."""
    xv, wv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    arr = const(wv)
    if arr is None:
        raise OpfuseError(f"C backend: {who(node)}: an int8 {node.op_type} needs constant weights")
    xq, wq, yq = quant(xv, node, "input"), quant(wv, node, "weight"), quant(yv, node, "output")
    if xq.scale.size != 1 or yq.scale.size != 1:
        raise OpfuseError(f"C backend: {who(node)}: activations must be quantized per tensor")
    if np.any(wq.zero_point):
        raise OpfuseError(f"C backend: {who(node)}: weights with a nonzero zero point are not "
                          "emitted")
    return arr, xq, wq, yq


def int_ctype(value: ir.Value, node: ir.Node) -> CType:
    ct = ctype_of(value)
    if ct is None or ct.is_float or ct.size != 1:
        raise OpfuseError(
            f"C backend: {who(node)}: '{value.name}' is "
            f"{value.dtype.name if value.dtype else 'untyped'}; int8 kernels take int8 or uint8"
        )
    return ct


def rounding(params: Params) -> str:
    return getattr(params.store, "rounding", TFLITE)


@dataclass(frozen=True)
class Requant:
    """Per-channel requantization of an int32 accumulator, as C: TFLite's (multiplier, shift)
    arrays or ONNX's float scales, stored once in weights.c. ``fast``: every shift is a right
    shift and the accumulator provably stays within 2^30 (``acc_bound``), so the call is
    ``opfuse_requant_r`` (requant.py: SMMULR on Armv7E-M, the general helper elsewhere; the same
    arrays). ``literal``: every channel has the same (multiplier, shift), written into the call
    instead of read from arrays. ``ranged`` (onnx): the accumulator bound times the largest
    scale is below 2^29 (``RANGED_BOUND``), so the call is ``opfuse_requant_fr``, whose clamps
    are left out (requant.py: one VCVTR on an Arm FPU)."""

    mode: str
    mult: str  # C pointer of the multipliers (tflite) or the float scales (onnx)
    shift: str | None
    scalar: bool
    fast: bool = False
    literal: tuple[int, int] | None = None
    ranged: bool = False

    def parts(self, ch: str = "0") -> tuple[str, str]:
        """The C expressions of the multiplier and the stored shift of channel ``ch``."""
        if self.literal is not None:
            return str(self.literal[0]), str(self.literal[1])
        i = "0" if self.scalar else ch
        return f"{self.mult}[{i}]", f"{self.shift}[{i}]"

    def scale(self, ch: str = "0") -> str:
        """The C expression of channel ``ch``'s float scale (onnx)."""
        return f"{self.mult}[{'0' if self.scalar else ch}]"

    def __call__(self, acc: str, ch: str = "0") -> str:
        i = "0" if self.scalar else ch
        if self.mode == ONNX:
            return f"opfuse_requant_f{'r' if self.ranged else ''}({acc}, {self.mult}[{i}])"
        m, s = self.parts(ch)
        return f"opfuse_requant{'_r' if self.fast else ''}({acc}, {m}, {s})"


def acc_bound(weights: np.ndarray, bias: np.ndarray, x_lo: int, x_hi: int, zx: int) -> int:
    """The largest ``|sum_k (x_k - z_x) w[c, k] + bias[c]|`` over the channels ``c`` (weights as
    [C][...]) for inputs in [x_lo, x_hi] (a pad reads z_x: no term): what a kernel's accumulator
    can reach, so the generator knows where the fast requantization is exact."""
    dx = max(x_hi - zx, zx - x_lo)
    wsum = np.abs(np.asarray(weights, np.int64)).reshape(len(bias), -1).sum(axis=1)
    return int((wsum * dx + np.abs(np.asarray(bias, np.int64))).max(initial=0))


FAST_BOUND = 1 << 30  # opfuse_requant_r doubles the accumulator in 32 bits (requant.py)
# opfuse_requant_fr: |x| <= B and scale <= S give |fl(fl(x) * S)| <= B S (1 + 2^-24)^2, so
# B S < 2^29 keeps the rounded value inside the +-2^30 clamps of opfuse_requant_f (and int32)
RANGED_BOUND = float(1 << 29)


def requant_arrays(params: Params, key: str, real: np.ndarray,
                   bound: int | None = None) -> Requant:
    """Store the multipliers of ``real`` (float64 for tflite, float32 for onnx) for one kernel.
    ``bound`` (``acc_bound``) lets a kernel use the fast form where it is exact (tflite: then
    one (multiplier, shift) shared by every channel is written as literals, with no arrays;
    onnx: ``Requant.ranged``)."""
    mode = rounding(params)
    real = np.atleast_1d(real)
    scalar = real.size == 1
    if mode == ONNX:
        scales = real.astype(np.float32)
        f = params.weight(f"{key}:rqf", scales, FLOAT)
        ranged = bound is not None and bound * float(np.abs(scales).max()) < RANGED_BOUND
        return Requant(mode, f, None, scalar, ranged=ranged)
    m, s = multipliers(real)
    # TFLite's shifts lie in [-31, 31]: one byte each in a board's flash (3 bytes fewer per
    # output channel of every layer; LDRSB is one load as LDR is), int32 on the host
    shift = INT8 if getattr(params.store, "narrow_constants", False) else INT32
    if bound is not None and bound < FAST_BOUND and bool((s <= -1).all()):
        if (m == m[0]).all() and (s == s[0]).all():
            return Requant(mode, "", "", True, fast=True, literal=(int(m[0]), int(s[0])))
        return Requant(mode, params.weight(f"{key}:rqm", m, INT32),
                       params.weight(f"{key}:rqs", s, shift), scalar, fast=True)
    return Requant(mode, params.weight(f"{key}:rqm", m, INT32),
                   params.weight(f"{key}:rqs", s, shift), scalar)


def rescale_expr(mode: str, x: str, real: float) -> str:
    """``x`` (an int32 expression) times one real multiplier, in the model's mode, as C."""
    from opfuse.quant import quantize_multiplier

    if mode == ONNX:
        return f"opfuse_requant_f({x}, {flit(real)})"
    m, s = quantize_multiplier(float(real))
    return f"opfuse_requant({x}, {m}, {s})"


def clamp_bounds(node: ir.Node, q: QuantParams, ct: CType, mode: str) -> tuple[int, int]:
    """The integer range of a Relu or Clip on a value quantized by ``q`` (its input and output
    share parameters: docs/architecture.md)."""
    from opfuse.backends.c.cgen import attr
    from opfuse.quant import activation_range

    if node.op_type == "Relu":
        return activation_range(q, 0.0, None, ct.lo, ct.hi, mode)
    bounds: list[float | int | None] = []
    for i, name in ((1, "min"), (2, "max")):
        v = node.inputs[i] if len(node.inputs) > i else None
        if v is not None:
            arr = const(v)
            if arr is None:
                raise OpfuseError(f"C backend: {who(node)}: its {name} must be a constant")
            if arr.dtype.kind in "iu":  # already quantized
                bounds.append(int(arr.ravel()[0]))
                continue
            bounds.append(float(arr.ravel()[0]))
        else:
            a = attr(node, name)
            bounds.append(None if a is None else float(a))
    lo, hi = bounds
    flo = lo if isinstance(lo, float) else None
    fhi = hi if isinstance(hi, float) else None
    a, b = activation_range(q, flo, fhi, ct.lo, ct.hi, mode)
    if isinstance(lo, int):
        a = max(a, lo)
    if isinstance(hi, int):
        b = min(b, hi)
    return a, b


def bias_array(node: ir.Node, index: int, channels: int) -> np.ndarray:
    """An int8 anchor's int32 bias (input ``index``) as int64 per output channel; zeros if absent."""
    v = node.inputs[index] if len(node.inputs) > index else None
    if v is None:
        return np.zeros(channels, np.int64)
    arr = const(v)
    if arr is None or arr.dtype.kind not in "iu":
        raise OpfuseError(f"C backend: {who(node)}: an int8 kernel needs a constant int32 bias")
    return np.broadcast_to(arr.ravel().astype(np.int64), (channels,)).copy()


def gemm_coords(shape: tuple[int, ...], row: str = "m", col: str = "j") -> list[str]:
    """The output's coordinates of Gemm row ``row``, column ``col`` (batched rows: the output's
    own dims), as an epilogue chain indexes them."""
    if len(shape) <= 2:
        return [row, col][-len(shape):] if shape else []
    coords, rest = [], row
    for d in range(len(shape) - 2, -1, -1):
        coords.insert(0, f"({rest}) % {shape[d]}")
        rest = f"({rest}) / {shape[d]}"
    return [*coords, col]
