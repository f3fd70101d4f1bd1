"""TFLite's integer arithmetic in Python, bit for bit, for tables computed at generation time.

``mbqm`` is MultiplyByQuantizedMultiplier with TFLite Micro's double rounding (as the C helper).
The unary kernels follow TFLite's reference integer kernels (semantics read from
tensorflow/lite/kernels/internal/reference; written here independently).
"""

from __future__ import annotations

import numpy as np

from opfuse.quant import QuantParams, quantize_multiplier

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def wrap32(x: int) -> int:
    return ((x + (1 << 31)) % (1 << 32)) - (1 << 31)


def srdhm(a: int, b: int) -> int:
    """Saturating rounding doubling high multiply (int32)."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    v = ab + nudge
    q = abs(v) >> 31  # C division truncates toward zero
    return q if v >= 0 else -q


def rdbpot(x: int, e: int) -> int:
    """Rounding divide by 2**e, ties away from zero."""
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


def mbqm(x: int, m: int, s: int) -> int:
    ls = s if s > 0 else 0
    return rdbpot(srdhm(wrap32(x << ls), m), 0 if s > 0 else -s)


def leaky_relu_table(qi: QuantParams, qo: QuantParams, lo: int, hi: int,
                     alpha: float) -> np.ndarray:
    """TFLite int8 LEAKY_RELU: identity and alpha multipliers on (q - z_i), + z_o, saturate."""
    si, so = float(qi.scale[0]), float(qo.scale[0])
    zi, zo = int(qi.zero_point[0]), int(qo.zero_point[0])
    m_id, s_id = quantize_multiplier(si / so)
    m_al, s_al = quantize_multiplier(float(np.float32(alpha)) * si / so)
    out = []
    for q in range(lo, hi + 1):
        d = q - zi
        v = mbqm(d, m_id, s_id) if d >= 0 else mbqm(d, m_al, s_al)
        out.append(min(max(v + zo, lo), hi))
    return np.array(out, np.int32)


def tflite_table(op: str, qi: QuantParams, qo: QuantParams, lo: int, hi: int,
                 alpha: float | None) -> np.ndarray | None:
    """The exact TFLite table of ``op``, or None where only the float form is written."""
    if op == "LeakyRelu":
        return leaky_relu_table(qi, qo, lo, hi, 0.01 if alpha is None else alpha)
    if op == "Identity":
        return np.arange(lo, hi + 1, dtype=np.int32)
    return None


# --- gemmlowp-style fixed point (Q0.31 and friends), as TFLite's int8 softmax uses it ---


def _sat_shift_left(x: int, e: int) -> int:
    """SaturatingRoundingMultiplyByPOT with a positive exponent."""
    thr = (1 << (31 - e)) - 1
    if x > thr:
        return INT32_MAX
    if x < -thr:
        return INT32_MIN
    return wrap32(x << e)


def _exp_quarter(a: int) -> int:
    """exp on [-1/4, 0) in Q0.31: a Taylor expansion around -1/8."""
    x = a + (1 << 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rdbpot(x4, 2)
    poly = rdbpot(srdhm(x4_over_4 + x3, 715827883) + x2, 1)
    c = 1895147668
    return c + srdhm(c, x + poly)


_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
           (3, 720401), (4, 242))


def exp_on_negative_values(a: int, integer_bits: int) -> int:
    """exp(a) for a <= 0 given as a Q(integer_bits).(31 - integer_bits) raw value -> Q0.31 raw."""
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    mask = quarter - 1
    a_mod = (a & mask) - quarter
    result = _exp_quarter(_sat_shift_left(a_mod, integer_bits) if integer_bits else a_mod)
    remainder = a_mod - a
    for exponent, mult in _BARREL:
        if integer_bits > exponent and remainder & (1 << (frac + exponent)):
            result = srdhm(result, mult)
    if integer_bits > 5 and a < -(1 << (36 - integer_bits)):
        result = 0
    return INT32_MAX if a == 0 else result


def softmax_tables(mult: int, left_shift: int, diff_min: int, lo: int, hi: int):
    """Per input difference d = x - max (index -d): the Q0.31 exp and its Q12.19 term for the sum;
    -1 marks a difference below diff_min (its output is the type's minimum)."""
    exps, terms = [], []
    for d in range(0, hi - lo + 1):
        diff = -d
        if diff < diff_min:
            exps.append(-1)
            terms.append(0)
            continue
        rescaled = srdhm(wrap32(diff << left_shift), mult)
        e = exp_on_negative_values(rescaled, 5)
        exps.append(e)
        terms.append(rdbpot(e, 12))
    return np.array(exps, np.int64).astype(np.int32), np.array(terms, np.int32)
