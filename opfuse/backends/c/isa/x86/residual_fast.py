"""A shorter integer form of TFLite's int8 ADD/SUB for one layer's quantization, proved at
generation time, for the residual epilogue of x86/residual.py (its exact form stays the fallback).

TFLite's ADD per element (``fixedpoint.tflite_add_np``): each input offset, shifted left by 20,
rescaled by MultiplyByQuantizedMultiplierSmallerThanOneExp (a 64-bit doubling high multiply and
a rounding divide), summed, rescaled the same way to the output, + z_out, clamped. The short
form, on int32 lanes ``x`` (the byte values):

* an input: ``t = (x*M + A) >> N`` (one ``vpmulld``, one add, one shift), ``M = round(m / 2^8)``
  (``m`` in [2^30, 2^31): ``|x - z| * M < 2^31``), ``N = 31 - 20 + e - 8``, ``A = 2^(N-1) -
  z*M``: TFLite's ``(x - z) * 2^20 * m / 2^(31 + e)`` with one rounding; the input of the larger
  scale has ``m = 2^30, e = 0`` exactly, ``t = (x - z) * 2^19`` (one shift, no rounding);
* the output, from ``S = t0 +- t1`` (an unshifted term's constant ``-z * 2^19`` times ``mo``
  added to the 64-bit product instead), either ``(S*mo + 2^(N-1) + c + z_out*2^N) >> N`` in 64
  bits (``vpmuldq``, ``N = 31 + e``, one rounding: ``single``), or TFLite's two roundings
  (``vpmuldq``, then ``(h + 2^(e-1) + z_out*2^e - (h < 0)) >> e``). With ``c = 2^30`` (``tie``)
  the one rounding is TFLite's two wherever ``h >= 0``: ``floor((floor((P + 2^30) / 2^31) +
  2^(e-1)) / 2^e) = floor((P + 2^30 + 2^(30+e)) / 2^(31+e))`` (a floor inside a floor divides
  at once; RoundingDivideByPOT is ``floor((h + 2^(e-1)) / 2^e)`` for ``h >= 0``), so below zero
  only (where a Relu with ``lo = z_out`` clamps either) can it differ; ``c = 0``: the rounding
  of the real value;
* the clamp to [lo, hi] only where it is narrower than int8, then ``vpmovsdb`` (saturating).

The single roundings differ from TFLite's double ones only near a rounding tie, so the form is
not exact in general. It is made exact per layer by proof: ``prove`` evaluates it in numpy
exactly as the C computes it (int32 lanes wrapping, 64-bit products) on every pair of input
bytes (256 x 256, every value the Add can see), compares all 65536 results with TFLite Micro's
reference arithmetic under the layer's own parameters and clamp, and returns the cheapest form
that equals it everywhere, or None: then x86/residual.py's exact form is written. The proof, not
the algebra, is what makes the short form bit-exact. ResNet-8 (pretrainedResnet_quant): its
three residual Adds are proved with one output rounding (``tie``; without it the first is
refuted on a few pairs); mcunet_vww: 7 of its 8 (op43 keeps the exact form).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.int8.fixedpoint import tflite_add_np
from opfuse.backends.c.isa.x86.vec import ZMM, Vec

M_BITS = 8  # bits dropped from an input multiplier: |x - z| * M < 255 * 2^23 < 2^31
MAX_OUT_SHIFT = 54  # the single rounding's 2^(N-1) + z_out*2^N stays in int64 (|z_out| < 2^8)


@dataclass(frozen=True)
class Term:
    """One input's rescale: ``x*mul + add``, then ``>> shift`` (0: none, exact)."""

    mul: int
    add: int
    shift: int


@dataclass(frozen=True)
class FastAdd:
    """The short form of one layer's Add (module docstring), in TFLite's input order."""

    t0: Term
    t1: Term
    sub: bool
    mo: int
    e: int  # the output's right shift
    single: bool  # one rounding (else TFLite's two)
    tie: bool  # the one rounding's constant + 2^30: TFLite's two wherever h >= 0
    zo: int
    lo: int
    hi: int
    int8: bool = True  # the output's type (uint8: no vpmovsdb)


def _c32(v: int) -> str:
    """An int32 constant (wrapped) as C."""
    v = ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    return "INT32_MIN" if v == -(1 << 31) else str(v)


def _wrap(v: np.ndarray) -> np.ndarray:
    """int64 lanes taken to int32 as the C's wrapping 32-bit arithmetic leaves them."""
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _term(m: int, s: int, z: int, left: int) -> Term | None:
    if m == 1 << 30 and s == 0:  # the larger scale's input: (x - z) * 2^(left - 1), exactly
        return Term(1 << (left - 1), -z << (left - 1), 0)
    n = 31 - left - s - M_BITS
    if not (1 << 30) <= m < (1 << 31) or n < 1:
        return None
    mul = (m + (1 << (M_BITS - 1))) >> M_BITS
    return Term(mul, (1 << (n - 1)) - z * mul, n)


@dataclass(frozen=True)
class AddLayer:
    """What TFLite's ADD (SUB) of one layer computes: quant.add_params' ``p``, the zero points
    of its inputs and output, the output's clamp (its type and fused Relu/Clip), the inputs'
    types (int8 or uint8 bytes) and the output's."""

    p: dict
    z0: int
    z1: int
    zo: int
    lo: int
    hi: int
    sub: bool = False
    signed: tuple[bool, bool] = (True, True)
    int8: bool = True


def candidates(layer: AddLayer) -> list[FastAdd]:
    """The short forms of ``layer``, cheapest first."""
    p = layer.p
    t0 = _term(int(p["m1"]), int(p["s1"]), layer.z0, int(p["left_shift"]))
    t1 = _term(int(p["m2"]), int(p["s2"]), layer.z1, int(p["left_shift"]))
    mo, e = int(p["mo"]), -int(p["so"])
    if t0 is None or t1 is None or not 0 < mo < 1 << 31 or not 0 <= e <= 31:
        return []
    forms = [FastAdd(t0, t1, layer.sub, mo, e, single, tie, layer.zo, layer.lo, layer.hi,
                     layer.int8) for single, tie in ((True, True), (True, False), (False, False))]
    return [f for f in forms if not f.single or 32 <= 31 + f.e <= MAX_OUT_SHIFT]


def _wide(f: FastAdd) -> int:
    """The constant added to the 64-bit product ``S*mo``: the unshifted terms' adds times
    ``mo``, and the rounding's constant (one rounding: z_out folded in too)."""
    k = [t.add if t.shift == 0 else 0 for t in (f.t0, f.t1)]
    c = (k[0] - k[1] if f.sub else k[0] + k[1]) * f.mo
    if not f.single:
        return c + (1 << 30)
    n = 31 + f.e
    return c + (1 << (n - 1)) + (1 << 30 if f.tie else 0) + (f.zo << n)


def evaluate(f: FastAdd, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """The C of ``emit_fast`` in numpy, operation by operation (int32 lanes wrap)."""
    def term(t: Term, x: np.ndarray) -> np.ndarray:  # an unshifted term's add: in _wide
        return _wrap(_wrap(x * t.mul) + t.add) >> t.shift if t.shift else _wrap(x * t.mul)

    s = _wrap(term(f.t0, x0) - term(f.t1, x1) if f.sub else term(f.t0, x0) + term(f.t1, x1))
    if f.single:
        o = _wrap((s * f.mo + _wide(f)) >> (31 + f.e))
    else:
        h = _wrap((s * f.mo + _wide(f)) >> 31)
        if f.e:
            o = _wrap(_wrap(h + (h >> 31)) + _wrap((1 << (f.e - 1)) + (f.zo << f.e))) >> f.e
        else:
            o = _wrap(h + f.zo)
    return np.clip(o, f.lo, f.hi)


def proves(f: FastAdd, layer: AddLayer) -> bool:
    """Whether ``f`` equals TFLite's ADD (SUB) of ``layer`` on every pair of input bytes."""
    v0, v1 = (np.arange(-128, 128) if s else np.arange(256) for s in layer.signed)
    x0, x1 = (a.astype(np.int64) for a in np.meshgrid(v0, v1, indexing="ij"))
    want = tflite_add_np(x0, x1, layer.z0, layer.z1, layer.zo, layer.p, layer.lo, layer.hi,
                         layer.sub)
    return bool(np.array_equal(evaluate(f, x0, x1), want))


def prove(layer: AddLayer) -> FastAdd | None:
    """The cheapest short form proved equal to TFLite's ADD (SUB) of ``layer``, or None."""
    return next((f for f in candidates(layer) if proves(f, layer)), None)


def _term_c(w: CWriter, name: str, t: Term, x: str, v: Vec = ZMM) -> None:
    """``name`` = the term of ``x`` (C vector of int32 values), an unshifted term's ``add`` left
    to the product's constant (``_wide``)."""
    if t.shift == 0:
        if t.mul & (t.mul - 1) == 0:
            w(f"const {v.t} {name} = {v.p}slli_epi32({x}, {t.mul.bit_length() - 1});")
        else:
            w(f"const {v.t} {name} = {v.p}mullo_epi32({x}, {v.p}set1_epi32({_c32(t.mul)}));")
        return
    w(f"const {v.t} {name} = {v.p}srai_epi32({v.p}add_epi32({v.p}mullo_epi32({x}, "
      f"{v.p}set1_epi32({_c32(t.mul)})), {v.p}set1_epi32({_c32(t.add)})), {t.shift});")


def emit_fast(w: CWriter, f: FastAdd, x0: str, x1: str, out: str, narrow: bool,
              v: Vec = ZMM, sat: bool = False) -> None:
    """``out`` from TFLite's input values ``x0``, ``x1`` (int32 vectors of ``v``): with
    ``narrow`` (zmm) the 16 output bytes (``__m128i``, ``vpmovsdb``), else the clamped int32
    values; the clamp written only where narrower than int8 when the bytes are saturated
    (``narrow``, or ``sat``: the caller packs with signed saturation)."""
    _term_c(w, "f0_", f.t0, x0, v)
    _term_c(w, "f1_", f.t1, x1, v)
    op = f"{v.p}sub_epi32" if f.sub else f"{v.p}add_epi32"
    w(f"const {v.t} fs_ = {op}(f0_, f1_), fm_ = {v.p}set1_epi32({f.mo}), "
      f"fr_ = {v.set64}({_wide(f)}LL);")
    even = f"{v.p}add_epi64({v.p}mul_epi32(fs_, fm_), fr_)"
    odd = f"{v.p}add_epi64({v.p}mul_epi32({v.p}srli_epi64(fs_, 32), fm_), fr_)"
    if f.single:  # floor((S*mo + 2^(n-1) + c + zo*2^n) / 2^n); odd lanes: the high dword
        w(f"{v.t} fo_ = {v.high(even, odd, 31 + f.e)};")
    else:  # TFLite's doubling high multiply, then its rounding divide with z_out folded in
        w(f"const {v.t} fh_ = {v.blend(f'{v.p}srli_epi64({even}, 31)', f'{v.p}slli_epi64({odd}, 1)')};")
        if f.e:
            w(f"{v.t} fo_ = {v.p}srai_epi32({v.p}add_epi32({v.p}add_epi32(fh_, "
              f"{v.p}srai_epi32(fh_, 31)), {v.p}set1_epi32({_c32((1 << (f.e - 1)) + (f.zo << f.e))})"
              f"), {f.e});")
        else:
            w(f"{v.t} fo_ = {v.p}add_epi32(fh_, {v.p}set1_epi32({f.zo}));")
    sat = (narrow or sat) and f.int8  # vpmovsdb, vpacksswb: those bounds need no clamp
    if f.lo > -128 or not sat:
        w(f"fo_ = {v.p}max_epi32(fo_, {v.p}set1_epi32({f.lo}));")
    if f.hi < 127 or not sat:
        w(f"fo_ = {v.p}min_epi32(fo_, {v.p}set1_epi32({f.hi}));")
    cvt = "_mm512_cvtsepi32_epi8" if sat else "_mm512_cvtepi32_epi8"
    w(f"{out} = {f'{cvt}(fo_)' if narrow else 'fo_'};")
