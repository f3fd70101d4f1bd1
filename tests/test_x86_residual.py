"""x86/residual_fast.py: the short form of TFLite's int8 ADD/SUB is written only where its proof
holds. The proof's reference (``fixedpoint.tflite_add_np``) against the scalar TFLite arithmetic;
the proof accepting real layers (ResNet-8's three residual Adds), refusing others (mcunet_vww's
op43, decimal scales with exact ties) and refusing deliberately wrong short forms; the numpy
evaluation the proof runs against the C it stands for, on every pair of bytes; ResNet-8 end to
end (every build bit-exact with TFLite Micro, tests/test_c_int8_x86.py has the kernel cases)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.int8.fixedpoint import mbqm, tflite_add_np
from opfuse.backends.c.isa.x86.residual_fast import (
    AddLayer,
    FastAdd,
    candidates,
    emit_fast,
    evaluate,
    prove,
    proves,
)
from opfuse.backends.c.isa.x86.vec import YMM
from opfuse.quant import add_params
from tests.helpers.c_int8 import shared_tflite_c_matches_tflm
from tests.helpers.cpu import c_stdout, cpu_flags

F32 = np.float32
# (input 0's, input 1's and the output's scale and zero point) of real layers
RESNET8 = {  # pretrainedResnet_quant's residual Adds (Relu fused: the output's zero point -128)
    "op3": ((0.039393551647663116, -128), (0.10419496148824692, 4), (0.050945673137903214, -128)),
    "op7": ((0.044761426746845245, -17), (0.11311884224414825, 4), (0.0532362163066864, -128)),
    "op11": ((0.08385830372571945, 38), (0.21724364161491394, -2), (0.1270691454410553, -128)),
}
MCUNET_OP43 = ((0.042797185480594635, -10), (0.03255853056907654, -8),
               (0.04156143218278885, -2))
DECIMAL = ((0.09, 4), (0.05, 3), (0.12, -2))  # 0.75 d0 + 0.4167 d1: 1/12 of the pairs tie


def _layer(layer, lo: int = -128, hi: int = 127, sub: bool = False) -> AddLayer:  # noqa: ANN001
    (s0, z0), (s1, z1), (so, zo) = layer
    return AddLayer(add_params(float(F32(s0)), float(F32(s1)), float(F32(so))), z0, z1, zo, lo,
                    hi, sub)


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    v = np.arange(-128, 128, dtype=np.int64)
    return tuple(np.meshgrid(v, v, indexing="ij"))


def test_reference_equals_scalar_tflite_arithmetic() -> None:
    """``tflite_add_np`` equals TFLite's ADD written with the scalar ``mbqm`` (the generator's
    MultiplyByQuantizedMultiplier), on 4096 seeded pairs of each layer, Add and Sub."""
    rng = np.random.default_rng(3)
    for layer in (*RESNET8.values(), MCUNET_OP43, DECIMAL):
        for sub in (False, True):
            lay = _layer(layer)
            p, z0, z1, zo, lo, hi = lay.p, lay.z0, lay.z1, lay.zo, lay.lo, lay.hi
            x0, x1 = rng.integers(-128, 128, 4096), rng.integers(-128, 128, 4096)
            got = tflite_add_np(x0, x1, z0, z1, zo, p, lo, hi, sub)
            for a, b, g in zip(x0.tolist(), x1.tolist(), got.tolist(), strict=True):
                ta = mbqm((a - z0) << p["left_shift"], p["m1"], p["s1"])
                tb = mbqm((b - z1) << p["left_shift"], p["m2"], p["s2"])
                want = mbqm(ta - tb if sub else ta + tb, p["mo"], p["so"]) + zo
                assert g == min(max(want, lo), hi)


def test_resnet8_layers_are_proved() -> None:
    """ResNet-8's Adds take the short form with one output rounding, its constant + 2^30
    (TFLite's two roundings wherever h >= 0, its Relu clamping the rest); op3's rounding of the
    real value (without the 2^30) differs from TFLite on a few pairs near ties: refuted."""
    forms = {name: prove(_layer(layer)) for name, layer in RESNET8.items()}
    assert all(f is not None and f.single and f.tie for f in forms.values())
    op3 = _layer(RESNET8["op3"])
    real = candidates(op3)[1]
    assert real.single and not real.tie and not proves(real, op3)
    x0, x1 = _pairs()
    bad = evaluate(real, x0, x1) != tflite_add_np(x0, x1, op3.z0, op3.z1, op3.zo, op3.p,
                                                  op3.lo, op3.hi)
    assert 0 < int(bad.sum()) < 10  # near ties only


def test_two_roundings_where_one_is_refuted() -> None:
    """Without a Relu, below zero the one rounding (tie or not) differs from TFLite's two on
    some pair of this layer: the form with TFLite's two is proved."""
    layer = _layer(((0.09, 4), (0.187, -7), (0.1972, 7)))
    forms = candidates(layer)
    assert [(f.single, f.tie) for f in forms] == [(True, True), (True, False), (False, False)]
    assert [proves(f, layer) for f in forms] == [False, False, True]
    assert prove(layer) == forms[2]


@pytest.mark.parametrize("layer", [MCUNET_OP43, DECIMAL], ids=["mcunet_op43", "decimal"])
def test_layers_without_a_proof_keep_the_exact_form(layer) -> None:  # noqa: ANN001
    assert candidates(_layer(layer))  # there were forms to try, and each was refuted
    assert prove(_layer(layer)) is None


def test_wrong_short_forms_are_refused() -> None:
    """The proof can fail: a proved form with one constant off is refuted on some pair."""
    layer = _layer(RESNET8["op7"])
    f = prove(layer)
    assert f is not None
    rounded = f.t0 if f.t0.shift else f.t1  # the input rescaled with a rounding shift
    key = "t0" if f.t0.shift else "t1"
    wrong = [
        dataclasses.replace(f, **{key: dataclasses.replace(rounded, mul=rounded.mul + 64)}),
        dataclasses.replace(f, **{key: dataclasses.replace(rounded, shift=rounded.shift + 1)}),
        dataclasses.replace(f, mo=f.mo + (1 << 16)),
        dataclasses.replace(f, e=f.e - 1),
        dataclasses.replace(f, zo=f.zo + 1),
        dataclasses.replace(f, sub=True),
        dataclasses.replace(f, hi=126),
    ]
    assert proves(f, layer)
    for w in wrong:
        assert not proves(w, layer), w


def _forms() -> list[tuple[FastAdd, bool]]:
    """Each shape of the C: single and double rounding, Add and Sub, a Relu's bound, the int32
    result and the narrowed bytes."""
    out = []
    for name, lo in (("op3", -128), ("op7", -128), ("op11", -128)):
        for f in candidates(_layer(RESNET8[name], lo=lo)):
            out += [(f, True), (f, False)]
    f = candidates(_layer(MCUNET_OP43, lo=-2, sub=True))[0]
    return [*out, (f, True), (dataclasses.replace(f, lo=-7, hi=100), False)]


def _hashes(cases: list[str], forms: list[FastAdd], lanes: int) -> tuple[str, int]:
    """A C program running the functions ``case0 ..`` of ``cases`` (one per form, ``lanes``
    bytes out) on all 65536 pairs, ``lanes`` second operands a call, hashing their bytes; and
    the same hash of ``evaluate``'s values, in the same order (i, then j, the form, the lane)."""
    calls = " ".join(f"case{k}(a, b, o + {k * lanes});" for k in range(len(forms)))
    source = ("#include <stdint.h>\n#include <stdio.h>\n#include <immintrin.h>\n" +
              "\n".join(cases) + "\nint main(void) { unsigned long h = 0;\n"
              f"int8_t o[{lanes * len(forms)}];\n"
              f"for (int i = -128; i < 128; ++i) for (int j = -128; j < 128; j += {lanes}) {{\n"
              f"int32_t a[{lanes}], b[{lanes}]; for (int l = 0; l < {lanes}; ++l) "
              "{ a[l] = i; b[l] = j + l; }\n"
              + calls + f"\nfor (int l = 0; l < {lanes * len(forms)}; ++l) "
              "h = h * 1000003u + (unsigned char)o[l]; }\nprintf(\"%lu\\n\", h); return 0; }\n")
    x0, x1 = _pairs()
    got = np.stack([evaluate(f, x0, x1) for f in forms], axis=-1)
    got = got.reshape(256, 256 // lanes, lanes, -1)
    h = 0
    for v in got.transpose(0, 1, 3, 2).reshape(-1).tolist():
        h = (h * 1000003 + (v & 0xFF)) % 2**64
    return source, h


def test_c_equals_the_numpy_form_the_proof_evaluates() -> None:
    """``emit_fast``'s C equals ``evaluate`` on all 65536 pairs of every shape: what the proof
    checked is what runs."""
    if "avx512bw" not in cpu_flags():
        pytest.skip("this CPU has no AVX-512BW")
    forms = _forms()
    w = CWriter(0)
    for k, (f, narrow) in enumerate(forms):
        w.open(f"static void case{k}(const int32_t *a, const int32_t *b, int8_t *out)")
        w("const __m512i x0 = _mm512_loadu_si512((const void *)a), "
          "x1 = _mm512_loadu_si512((const void *)b);")
        w("__m128i o;" if narrow else "__m512i o;")
        emit_fast(w, f, "x0", "x1", "o", narrow)
        w("_mm_storeu_si128((__m128i *)out, o);" if narrow else
          "_mm_storeu_si128((__m128i *)out, _mm512_cvtepi32_epi8(o));")
        w.close()
    source, h = _hashes(w.lines, [f for f, _ in forms], 16)
    assert c_stdout(source, "opfuse-fast-add-") == str(h)


def test_ymm_c_equals_the_numpy_form_the_proof_evaluates() -> None:
    """The same on the ymm spelling (x86/vec.py: the single rounding's 64-bit shift without
    vpsraq), its int32 lanes saturated to bytes as the AVX2 store's packs do (``sat``: the
    int8 bounds left to them)."""
    if "avx2" not in cpu_flags():
        pytest.skip("this CPU has no AVX2")
    forms = [(f, sat) for f, narrow in _forms() if narrow for sat in (True, False)]
    w = CWriter(0)
    for k, (f, sat) in enumerate(forms):
        w.open(f"static void case{k}(const int32_t *a, const int32_t *b, int8_t *out)")
        w("const __m256i x0 = _mm256_loadu_si256((const __m256i *)a), "
          "x1 = _mm256_loadu_si256((const __m256i *)b);")
        w("__m256i o;")
        emit_fast(w, f, "x0", "x1", "o", False, YMM, sat)
        w("int32_t v[8]; _mm256_storeu_si256((__m256i *)v, o);")
        w("for (int l = 0; l < 8; ++l) out[l] = (int8_t)(v[l] < -128 ? -128 : v[l] > 127 ? 127 "
          ": v[l]);")
        w.close()
    source, h = _hashes(w.lines, [f for f, _ in forms], 8)
    assert c_stdout(source, "opfuse-fast-add-ymm-") == str(h)


def test_resnet8_builds_match_tflite_micro() -> None:
    """pretrainedResnet_quant's C takes the short form in its three residual Adds and equals
    TFLite Micro (native build: the zmm branch; x86-64-v3: the AVX2 branch's, x86/residual_ymm.py)."""
    if "avx512_vnni" not in cpu_flags():
        pytest.skip("this CPU has no avx512_vnni: the short form's branch cannot run here")
    c = shared_tflite_c_matches_tflm("pretrainedResnet_quant.tflite",
                                     [("native", ["-march=native"]),
                                      ("v3", ["-march=x86-64-v3"])], 3, "const __m512i fs_")
    assert "o_x" not in c  # no Add left on the exact form
    assert c.count("_mm_cvtsi32_si128(d0_)") >= 6  # the three on both ymm branches too
