"""Unary int8 ops as 256-entry tables computed at generation time.

An int8 -> int8 unary op is exactly a table over its 256 inputs, so the table is computed here in
Python with the op's integer semantics and the C only indexes it. ``onnx`` rounding: dequantize,
the float function, quantize half to even (QDQ's definition). ``tflite``: the integer algorithm
of TFLite's reference kernel where one is written here (see ``fixedpoint``), else the float form.
"""

from __future__ import annotations

import math

import numpy as np

from opfuse.ops import groups
from opfuse.quant import ONNX, QuantParams

FLOAT_FUNCS = {
    "Sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
    "Tanh": math.tanh,
    "HardSwish": lambda x: x * min(max(x / 6.0 + 0.5, 0.0), 1.0),
    "Identity": lambda x: x,
    "Neg": lambda x: -x,
    "Abs": abs,
    "Exp": lambda x: math.exp(min(x, 80.0)),
    "Elu": lambda x: x if x > 0 else math.expm1(x),
    "Gelu": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
}

LUT_OPS = groups.C_INT8_LUT  # FLOAT_FUNCS and the two with parameters below (the op registry's)


def _float_fn(op: str, alpha: float | None, beta: float | None):
    if op == "LeakyRelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: x if x >= 0 else a * x
    if op == "HardSigmoid":
        a = 0.2 if alpha is None else alpha
        b = 0.5 if beta is None else beta
        return lambda x: min(max(a * x + b, 0.0), 1.0)
    return FLOAT_FUNCS[op]


def float_table(op: str, qi: QuantParams, qo: QuantParams, lo: int, hi: int,
                alpha: float | None = None, beta: float | None = None) -> np.ndarray:
    """QDQ semantics: q_out = sat(rint(f(s_i (q - z_i)) / s_o) + z_o), computed in float32."""
    fn = _float_fn(op, alpha, beta)
    si, zi = np.float32(qi.scale[0]), int(qi.zero_point[0])
    so, zo = np.float32(qo.scale[0]), int(qo.zero_point[0])
    out = []
    for q in range(lo, hi + 1):
        x = float(np.float32(si * np.float32(q - zi)))
        y = np.float32(fn(x))
        r = int(np.rint(np.float32(y / so))) + zo
        out.append(min(max(r, lo), hi))
    return np.array(out, np.int32)


def table(op: str, mode: str, qi: QuantParams, qo: QuantParams, lo: int, hi: int,
          alpha: float | None = None, beta: float | None = None) -> np.ndarray:
    """The table of ``op`` over inputs lo..hi (index q - lo)."""
    if mode != ONNX:
        from opfuse.backends.c.int8 import fixedpoint

        exact = fixedpoint.tflite_table(op, qi, qo, lo, hi, alpha)
        if exact is not None:
            return exact
    return float_table(op, qi, qo, lo, hi, alpha, beta)
