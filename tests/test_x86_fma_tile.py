"""The x86 float register tile (opfuse/backends/c/isa/x86/fma_tile.py, ``IsaKernels.fma_tile``) in
the float conv cores it serves, against onnxruntime: each model's generated C built with
-march=native (the zmm branch, on an AVX-512 host), -march=x86-64-v3 (the ymm branch) and
-march=x86-64-v2 (the portable #else), layer by layer and cascaded. The shapes reach the tile's
edges: a last partial vector (masked zmm, maskload ymm), 8-lane channel blocks, several passes of
ymm bands, padded and strided taps, groups, a pointwise tile of one pixel, and the fused epilogue
(bias, Relu, a residual Add) after the tile or in the transposed registers; a cascade's direct
member and its column tile members (pointwise.py) on rings."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c import emit_c
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model
from tests.helpers.cpu import cpu_flags, gcc_macros
from tests.helpers.parsed import normal, parsed_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

CASES = {
    # conv.py's pointwise path (>= 256 pixels): 289 pixels = 9 tiles of 32 + 1, 40 channels in
    # 5 tiles of 8, bias, a residual Add and Relu after the tile
    "pointwise_tail": parsed_model("""g (float[1,24,17,17] x, float[1,40,17,17] r) => (float[1,40,17,17] y) {
        c = Conv(x, w, b)
        s = Add(c, r)
        y = Relu(s)
    }""", w=normal(40, 24, 1, 1), b=normal(40, seed=1)),
    # the pointwise path's blocks of conv.X_BLOCK floats of input: 256 channels x 1600 pixels
    # (50 tiles of 32) run in blocks of 8 tiles and a partial one of 2, residual Add and Relu,
    # its 48 x 1600 floats (more than X_BLOCK) prefetched a tile ahead (the last tile's its own)
    "pointwise_blocks": parsed_model("""g (float[1,256,40,40] x, float[1,48,40,40] r) => (float[1,48,40,40] y) {
        c = Conv(x, w, b)
        s = Add(c, r)
        y = Relu(s)
    }""", w=normal(48, 256, 1, 1), b=normal(48, seed=1)),
    # convdirect.py: 3x3 padded, 48 channels (a block of 32 and one of 16), 13 columns
    "direct_3x3": parsed_model("""g (float[1,20,11,13] x) => (float[1,48,11,13] y) {
        c = Conv<pads=[1,1,1,1]>(x, w, b)
        y = Relu(c)
    }""", w=normal(48, 20, 3, 3), b=normal(48, seed=1)),
    # stride 2, two groups of 20 channels each (blocks 16 + 4, padded to 8 lanes), no bias
    "direct_strided_groups": parsed_model("""g (float[1,16,15,15] x) => (float[1,40,8,8] y) {
        y = Conv<pads=[1,1,1,1], strides=[2,2], group=2>(x, w)
    }""", w=normal(40, 8, 3, 3)),
    # a pointwise conv on a small plane (convdirect's tile, 6 pixels x 32 channels), 96 outputs
    "direct_pointwise": parsed_model("""g (float[1,64,6,6] x) => (float[1,96,6,6] y) {
        c = Conv(x, w, b)
        y = Relu(c)
    }""", w=normal(96, 64, 1, 1), b=normal(96, seed=1)),
    # convdirect's tile with a residual Add and Relu: under AVX-512 applied to each channel's
    # transposed register (tile_transpose's steps), 7 pixels x (32 + 16) channels
    "direct_residual": parsed_model("""g (float[1,64,7,7] x, float[1,48,7,7] r) => (float[1,48,7,7] y) {
        c = Conv(x, w, b)
        s = Add(c, r)
        y = Relu(s)
    }""", w=normal(48, 64, 1, 1), b=normal(48, seed=1)),
    # the same with the residual first, a Relu before it and no bias, 16 pixels a row
    "direct_residual_first": parsed_model("""g (float[1,32,4,4] x, float[1,32,4,4] r) => (float[1,32,4,4] y) {
        c = Conv(x, w)
        a = Relu(c)
        y = Add(r, a)
    }""", w=normal(32, 32, 1, 1)),
    # a pointwise conv on a 7x7 plane as one flat row of 49 pixels, weight blocks of 32 KB:
    # 32-channel tiles of 10, 10, 10, 10 and 9 pixels (convdirect.WIDE_PIXELS, even tiles), a
    # residual Add and Relu
    "direct_pointwise_wide": parsed_model("""g (float[1,256,7,7] x, float[1,64,7,7] r) => (float[1,64,7,7] y) {
        c = Conv(x, w, b)
        s = Add(c, r)
        y = Relu(s)
    }""", w=normal(64, 256, 1, 1), b=normal(64, seed=1)),
    # weights of 885 KB in three blocks of 32 channels over a 7x7 plane: each block's tiles
    # prefetch the next block (convdirect._prefetch), the last one its own
    "direct_prefetch": parsed_model("""g (float[1,256,7,7] x) => (float[1,96,7,7] y) {
        c = Conv<pads=[1,1,1,1]>(x, w, b)
        y = Relu(c)
    }""", w=normal(96, 256, 3, 3), b=normal(96, seed=1)),
    # two 3x3 convs in a row, the second's line buffer over kernelplan.convf.LINE_FLOATS: a
    # cascade's direct member on a ring (convdirect.emit_direct_rows)
    "cascade_pair": parsed_model("""g (float[1,8,24,120] x) => (float[1,16,24,120] y) {
        a = Conv<pads=[1,1,1,1]>(x, w1, b1)
        r = Relu(a)
        c = Conv<pads=[1,1,1,1]>(r, w2, b2)
        y = Relu(c)
    }""", w1=normal(64, 8, 3, 3), b1=normal(64, seed=1), w2=normal(16, 64, 3, 3, seed=2),
        b2=normal(16, seed=3)),
    # a 3x3 conv then a 1x1 conv and a residual Add, 72 columns: cascaded, both members are
    # pointwise.py's column tiles on rings (8 x 16, the last tile of a row 8 columns: a masked
    # zmm), the 1x1 over 20 channels (blocks of 8, 8 and 4 zero-padded), under the register tile
    "cascade_columns": parsed_model("""g (float[1,8,40,72] x, float[1,20,40,72] s) => (float[1,20,40,72] y) {
        a = Conv<pads=[1,1,1,1]>(x, w1, b1)
        r = Relu(a)
        c = Conv(r, w2, b2)
        y = Add(c, s)
    }""", w1=normal(24, 8, 3, 3), b1=normal(24, seed=1), w2=normal(20, 24, 1, 1, seed=2),
        b2=normal(20, seed=3)),
}


# (march, the macro that selects the branch, the CPU flag it needs, a pattern of the tile's steps
# only that branch has: zmm rows of several vectors step through helpers' opfuse_x86_fma16)
BUILDS = [
    ("native", "__AVX512F__", "avx512f", r"opfuse_x86_fma16\(va|_mm512_fmadd_ps\(vs"),
    ("x86-64-v3", "__FMA__", "fma", r"_mm256_fmadd_ps\(vs"),
    ("x86-64-v2", None, None, None),
]


@pytest.mark.parametrize("cascades", [False, True], ids=["layers", "cascades"])
@pytest.mark.parametrize("march,macro,cpu,call", BUILDS, ids=[b[0] for b in BUILDS])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fma_tile_builds_match_onnxruntime(case: str, march: str, macro: str | None,
                                          cpu: str | None, call: str | None, cascades: bool,
                                          tmp_path: Path) -> None:
    if cpu is not None and cpu not in cpu_flags():
        pytest.skip(f"this CPU has no {cpu}")
    if macro is not None:
        assert macro in gcc_macros([f"-march={march}"]), f"-march={march} does not define {macro}"
    model = tmp_path / "m.onnx"
    model.write_bytes(CASES[case].SerializeToString())
    emit_c(compile_model(str(model), "x86-host"), tmp_path / "c", cascades=cascades)
    text = (tmp_path / "c" / "model.c").read_text()
    if call is not None:
        assert re.search(call, text), "the conv did not take the register tile"
    if case == "direct_pointwise_wide" and call is not None:
        assert "float acc[10][32]" in text and "float acc[9][32]" in text, "not even 10 + 9 tiles"
    if case == "pointwise_blocks":  # every target with the register tile writes the same C
        assert "for (int q0 = 0; q0 < 50; q0 += 8)" in text, "not in runs of 8 tiles"
        assert "i0 + 32 < 1600 ? i0 + 32 : i0" in text and "__builtin_prefetch((arg" in text, \
            "no prefetch of the next tile's residual"
    if case == "pointwise_tail":  # a residual of 40 x 289 floats stays in L2: no prefetch
        assert "for (int q0 = 0;" in text and "__builtin_prefetch" not in text
    if case == "direct_prefetch" and call is not None:
        assert "_mm_prefetch((const char *)pf" in text, "no prefetch of the next block"
    if case == "cascade_pair" and cascades:
        assert "for (int oh = a; oh <= b; ++oh)" in text, "no direct member on a ring"
    if case == "cascade_columns" and cascades:
        members = text[text.index("_cascade("):]
        assert "float acc[8][16];" in members, "no column tile member on a ring"
        assert call is None or re.search(call, members), "the members did not take the register tile"
    feeds, want, _ = reference(model)
    lib = CModel(build_shared(tmp_path / "c", (f"-march={march}",), name="lib_t.so"))
    got = lib.run(feeds)
    for name, ref in want.items():  # sums of up to 576 products: rounding scales with them
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(got[name].reshape(ref.shape), ref, rtol=1e-4,
                                   atol=1e-5 * scale, err_msg=f"{case} -march={march}")


@pytest.mark.parametrize("march,macro,cpu,call", BUILDS, ids=[b[0] for b in BUILDS])
def test_channel_tile_members_match_onnxruntime(march: str, macro: str | None, cpu: str | None,
                                                call: str | None, tmp_path: Path) -> None:
    # rows of 9 columns streamed with no minimum row width: the 1x1 members are cascade_rows.py's
    # channel tiles (16 channels x 4 columns, the reduction vectorized over the channels), 21
    # channels (a zero-padded block), a residual Add read along the rows
    from tests.helpers.c_cascade import host
    from tests.helpers.cascade import conv_chain

    if cpu is not None and cpu not in cpu_flags():
        pytest.skip(f"this CPU has no {cpu}")
    model = tmp_path / "m.onnx"
    model.write_bytes(conv_chain([{"k": 1, "out": 21}, {"k": 3, "group": 21}, {"k": 1, "out": 8}],
                                 size=9, residual=(0, 2)).SerializeToString())
    emit_c(compile_model(str(model), host("chain")), tmp_path / "c", cascades=True)
    members = (tmp_path / "c" / "model.c").read_text()
    members = members[members.index("_cascade("):]
    assert "float s[4][16]" in members, "no channel tile member"
    assert call is None or re.search(call, members), \
        "the channel tiles did not take the register tile"
    feeds, want, _ = reference(model)
    got = CModel(build_shared(tmp_path / "c", (f"-march={march}",), name="lib_t.so")).run(feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name].reshape(ref.shape), ref, rtol=1e-4, atol=1e-5,
                                   err_msg=f"-march={march}")


def test_zmm_steps_asm_where_rows_have_several_vectors(tmp_path: Path) -> None:
    # direct_residual's tiles: 7 pixels x 32 channels (two zmm a row: opfuse_x86_fma16, its
    # operands in registers) and 16 x 16 (one zmm a row: the intrinsic, whose broadcast gcc folds
    # into the FMA); built with -masm=intel too, the asm's other spelling, against onnxruntime
    if "avx512f" not in cpu_flags():
        pytest.skip("this CPU has no avx512f")
    model = tmp_path / "m.onnx"
    model.write_bytes(CASES["direct_residual"].SerializeToString())
    emit_c(compile_model(str(model), "x86-host"), tmp_path / "c", cascades=False)
    text = (tmp_path / "c" / "model.c").read_text()
    assert "float acc[7][32]" in text and "float acc[16][16]" in text
    two = text[text.index("float acc[7][32]"):]
    two = two[:two.index("#elif")]
    one = text[text.index("float acc[16][16]"):]
    one = one[:one.index("#elif")]
    assert "opfuse_x86_fma16(va" in two and "_mm512_fmadd_ps(vs" not in two
    assert "_mm512_fmadd_ps(vs" in one and "opfuse_x86_fma16(va" not in one
    feeds, want, _ = reference(model)
    for flags in (("-march=native",), ("-march=native", "-masm=intel")):
        got = CModel(build_shared(tmp_path / "c", flags, name=f"lib_{len(flags)}.so")).run(feeds)
        for name, ref in want.items():
            np.testing.assert_allclose(got[name].reshape(ref.shape), ref, rtol=1e-4, atol=1e-5,
                                       err_msg=" ".join(flags))
