"""TFLite's integer arithmetic in Python, bit for bit, for tables computed at generation time.

``mbqm`` is MultiplyByQuantizedMultiplier with TFLite Micro's double rounding (as the C helper).
The unary kernels follow TFLite's reference integer kernels (semantics read from
tensorflow/lite/kernels/internal/reference; written here independently).
"""

from __future__ import annotations

from collections.abc import Callable

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


def srdhm_np(a: np.ndarray, b: int) -> np.ndarray:
    """``srdhm`` lane by lane over an int64 array of int32 values (``b`` is never INT32_MIN:
    add_params' multipliers are positive)."""
    ab = np.asarray(a, np.int64) * np.int64(b)
    v = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    return np.where(v >= 0, v >> 31, -((-v) >> 31))  # C's division truncates toward zero


def rdbpot_np(x: np.ndarray, e: int) -> np.ndarray:
    """``rdbpot`` lane by lane."""
    mask = (1 << e) - 1
    return (x >> e) + ((x & mask) > (mask >> 1) + (x < 0))


def tflite_add_np(x0: np.ndarray, x1: np.ndarray, z0: int, z1: int, zo: int, p: dict, lo: int,
                  hi: int, sub: bool = False) -> np.ndarray:
    """TFLite Micro's int8 ADD (SUB with ``sub``) of the integers ``x0``, ``x1`` element by
    element, as its reference kernel computes it: each input offset, shifted left by
    ``left_shift``, MultiplyByQuantizedMultiplierSmallerThanOneExp (``srdhm`` then ``rdbpot``)
    to twice the larger scale; their sum (difference) requantized to the output the same way,
    + the output zero point, clamped to [lo, hi] (the fused activation). ``p``: add_params."""
    ls = 1 << p["left_shift"]
    a = rdbpot_np(srdhm_np((np.asarray(x0, np.int64) - z0) * ls, p["m1"]), -p["s1"])
    b = rdbpot_np(srdhm_np((np.asarray(x1, np.int64) - z1) * ls, p["m2"]), -p["s2"])
    raw = a - b if sub else a + b
    return np.clip(rdbpot_np(srdhm_np(raw, p["mo"]), -p["so"]) + zo, lo, hi)


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
    if op == "Identity" and qi == qo:
        return np.arange(lo, hi + 1, dtype=np.int32)
    if lo != -128:  # TFLite's integer kernels below are int8 ones
        return None
    if op == "Sigmoid":
        return sigmoid_table(qi)
    if op == "Tanh":
        return tanh_table(qi)
    if op == "HardSwish":
        return hard_swish_table(qi, qo)
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


def _recip_newton(a: int, minus_one: bool) -> int:
    """1/(1+a) (or (1-a)/(1+a)) for a in [0, 1) Q0.31, by three Newton-Raphson steps in Q2.29."""
    s = a + INT32_MAX
    half = (s + (1 if s >= 0 else -1)) // 2 if s >= 0 else -((-s + 1) // 2)
    x = 1515870810 + srdhm(half, -1010580540)
    for _ in range(3):
        one_minus = (1 << 29) - srdhm(half, x)
        x = x + _sat_shift_left(srdhm(x, one_minus), 2)
    return _sat_shift_left(x - (1 << 29), 2) if minus_one else _sat_shift_left(x, 1)


def _frexp_multiplier(real: float) -> tuple[int, int]:
    """TFLite's inline frexp + round (no renormalization) of the logistic/tanh prepare."""
    import math

    q, shift = math.frexp(real)
    return int(math.floor(q * (1 << 31) + 0.5)), shift


def _input_radius(integer_bits: int, left_shift: int) -> int:
    import math

    return math.floor(((1 << integer_bits) - 1) * (1 << (31 - integer_bits)) / (1 << left_shift))


def _q427_table(qi: QuantParams, value: Callable[[int], int]) -> np.ndarray:
    """The 256-entry table of a TFLite int8 activation whose input is rescaled to Q4.27:
    saturated outside the input radius, ``value(a)`` (a the Q4.27 input) inside it."""
    m, shift = _frexp_multiplier(float(qi.scale[0]) * (1 << 27))
    radius = _input_radius(4, shift)
    zi = int(qi.zero_point[0])
    out = []
    for q in range(-128, 128):
        x = q - zi
        out.append(-128 if x <= -radius else 127 if x >= radius else value(mbqm(x, m, shift)))
    return np.array(out, np.int32)


def _sigmoid_q427(a: int) -> int:
    if a == 0:
        r = 1 << 30
    else:
        pos = _recip_newton(exp_on_negative_values(-abs(a), 4), False)
        r = pos if a > 0 else INT32_MAX - pos
    return min(max(rdbpot(r, 23) - 128, -128), 127)


def _tanh_q427(a: int) -> int:
    if a == 0:
        r = 0
    else:
        n = a if a < 0 else -a
        t = _recip_newton(exp_on_negative_values(n, 5), True)
        r = -t if a < 0 else t
    return min(max(rdbpot(r, 24), -128), 127)


def sigmoid_table(qi: QuantParams) -> np.ndarray:
    """TFLite int8 LOGISTIC (output scale 1/256, zero point -128): input in Q4.27."""
    return _q427_table(qi, _sigmoid_q427)


def tanh_table(qi: QuantParams) -> np.ndarray:
    """TFLite int8 TANH (output scale 1/128, zero point 0): input in Q4.27."""
    return _q427_table(qi, _tanh_q427)


def _srdhm16(a: int, b: int) -> int:
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    v = ab + nudge
    return _wrap16(abs(v) >> 15 if v >= 0 else -(abs(v) >> 15))


def _wrap16(x: int) -> int:
    return ((x + (1 << 15)) % (1 << 16)) - (1 << 15)


def _sat16(x: int) -> int:
    return min(max(x, -(1 << 15)), (1 << 15) - 1)


def _to16(m: int) -> int:
    return (1 << 15) - 1 if m >= INT32_MAX - (1 << 15) else (m + (1 << 15)) >> 16


def hard_swish_table(qi: QuantParams, qo: QuantParams) -> np.ndarray:
    """TFLite int8 HARD_SWISH: 16-bit fixed point with a hi-res input scale of s_in / 128."""
    si, so = np.float32(qi.scale[0]), np.float32(qo.scale[0])
    hires = np.float32(np.float32(1.0 / 128.0) * si)
    om, oe = quantize_multiplier(float(np.float32(hires / so)))
    rm, re = quantize_multiplier(float(np.float32(hires / np.float32(3.0 / 32768.0))))
    om16, rm16 = _to16(om), _to16(rm)
    zi, zo = int(qi.zero_point[0]), int(qo.zero_point[0])
    out = []
    for q in range(-128, 128):
        v = _wrap16(q - zi)
        hi = _wrap16(v * 128)
        pre = _srdhm16(hi, om16)
        r = hi
        if re > 0:
            r = _sat16(r * (1 << (re - 1)))
        r = _srdhm16(r, rm16)
        if re > 0:
            r = _sat16(r * 2)
        if re < 0:
            r = rdbpot(r, -re)
        r = _wrap16((r + (1 << 15)) >> 1)
        if r == pre == -(1 << 15):
            p = (1 << 15) - 1
        else:
            ab = r * pre
            p = _wrap16(abs(ab) >> 15 if ab >= 0 else -(abs(ab) >> 15))
        o = _wrap16(rdbpot(p, -oe) + zo)
        out.append(min(max(o, -128), 127))
    return np.array(out, np.int32)
