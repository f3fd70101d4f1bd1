"""A TFLite model's NHWC graph input read in place by its first Conv (fusion/views.py,
``RowSource.nhwc`` in backends/c/rowsource.py): no Transpose kernel at the boundary and no
full-size NCHW copy of the input, in the plan analyze reports and in the C, with the reference's
numbers (LiteRT for float, TFLite Micro bit for bit for int8)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite")

from opfuse.measure.validate.c_float import validate_c  # noqa: E402
from opfuse.pipeline import compile_model  # noqa: E402
from tests.helpers import qgraphs as q  # noqa: E402
from tests.helpers import tflite_builder as tb  # noqa: E402
from tests.helpers.mcu_convs import CONV_CASES, conv_tflite  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models" / "tflite"


def _float_stem(h: int, w: int, c: int, oc: int, seed: int) -> bytes:
    """CONV_2D 3x3 stride 2 SAME + RELU over a float NHWC input: a network's stem."""
    rng = np.random.default_rng(seed)
    oh, ow = -(-h // 2), -(-w // 2)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, c), np.float32)
    wt = q.tensor(m, (oc, 3, 3, c), np.float32,
                  data=rng.normal(0, 0.3, (oc, 3, 3, c)).astype(np.float32))
    bias = q.tensor(m, (oc,), np.float32, data=rng.normal(0, 0.1, oc).astype(np.float32))
    y = q.tensor(m, (1, oh, ow, oc), np.float32)
    q.add_op(m, "CONV_2D", [x, wt, bias], [y], q.conv_options((2, 2), "SAME", "relu"))
    m.inputs, m.outputs = [x], [y]
    return m.build()


def _stem_then_stride(h: int, w: int, seed: int) -> bytes:
    """A stem widening 3 -> 16 channels at full resolution, then a stride-2 conv down to 4: the
    stem's output is the largest value unless the two stream in a cascade."""
    rng = np.random.default_rng(seed)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, 3), np.float32)
    w1 = q.tensor(m, (16, 3, 3, 3), np.float32,
                  data=rng.normal(0, 0.3, (16, 3, 3, 3)).astype(np.float32))
    b1 = q.tensor(m, (16,), np.float32, data=np.zeros(16, np.float32))
    y1 = q.tensor(m, (1, h, w, 16), np.float32)
    q.add_op(m, "CONV_2D", [x, w1, b1], [y1], q.conv_options((1, 1), "SAME", "relu"))
    w2 = q.tensor(m, (4, 3, 3, 16), np.float32,
                  data=rng.normal(0, 0.3, (4, 3, 3, 16)).astype(np.float32))
    b2 = q.tensor(m, (4,), np.float32, data=np.zeros(4, np.float32))
    y2 = q.tensor(m, (1, -(-h // 2), -(-w // 2), 4), np.float32)
    q.add_op(m, "CONV_2D", [y1, w2, b2], [y2], q.conv_options((2, 2), "SAME", None))
    m.inputs, m.outputs = [x], [y2]
    return m.build()


def _quantized_stem(h: int, w: int, seed: int) -> bytes:
    """A float input QUANTIZEd to int8, then an int8 CONV_2D 3x3 (mcunet_vww's start)."""
    rng = np.random.default_rng(seed)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, 3), np.float32)
    xq = q.tensor(m, (1, h, w, 3), np.int8, 0.02, -7)
    q.add_op(m, "QUANTIZE", [x], [xq])
    ws = rng.uniform(0.002, 0.02, 8).astype(np.float32)
    wi = q.tensor(m, (8, 3, 3, 3), np.int8, ws, 0, 0,
                  rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8))
    bi = q.tensor(m, (8,), np.int32, 0.02 * ws, 0, 0, rng.integers(-900, 900, 8).astype(np.int32))
    y = q.tensor(m, (1, h, w, 8), np.int8, 0.05, 3)
    q.add_op(m, "CONV_2D", [xq, wi, bi], [y], q.conv_options((1, 1), "SAME", "relu6"))
    m.inputs, m.outputs = [x], [y]
    return m.build()


def _reads_input_in_place(result) -> bool:  # noqa: ANN001
    """The first conv's kernel starts with the input's Transpose, and no kernel of its own
    transposes a graph input."""
    inputs = {v.name for v in result.optimized.graph.inputs}
    kernels = result.partition.without_cascades().kernels
    lone = [k for k in kernels if k.ops == ("Transpose",) and inputs & set(k.inputs)]
    first = next(k for k in kernels if "Conv" in k.ops)  # after a float input's Quantize, Pad
    return not lone and first.ops[:2] == ("Transpose", "Conv")


def _arena(folder: Path) -> int:
    line = next(t for t in (folder / "model.h").read_text().splitlines()
                if t.startswith("#define OPFUSE_ARENA_BYTES"))
    return int(line.split()[-1])


@pytest.mark.parametrize("h, w, c, oc", [(20, 34, 3, 8), (17, 41, 3, 8)])
def test_float_stem_reads_the_nhwc_input_in_place(h: int, w: int, c: int, oc: int,
                                                  tmp_path: Path) -> None:
    path = tmp_path / "stem.tflite"
    path.write_bytes(_float_stem(h, w, c, oc, seed=h + c))
    result = compile_model(str(path), "x86-host")
    assert _reads_input_in_place(result)
    report = validate_c(result, outdir=tmp_path / "c")  # LiteRT, its own tolerance
    assert report.ok, report
    # the input and its NCHW copy are never live together: the peak is below both
    assert _arena(tmp_path / "c") < 2 * h * w * c * 4


INT8_CASES = {name: case for name, case in CONV_CASES.items() if case[2] > 1}  # C = 1: a Reshape


@pytest.mark.parametrize("case", sorted(INT8_CASES))
def test_int8_matrix_conv_reads_the_nhwc_input_in_place(case: str, tmp_path: Path) -> None:
    """Every im2col order (pointwise, taps, generic) fills from NHWC rows on cortex-m7, bit-exact
    with TFLite Micro (the portable C of the same fill, on the host); x86-host's staging gathers
    NHWC pixels (its builds at every -march: the next test)."""
    pytest.importorskip("tflite_micro")
    from opfuse.measure.validate.c_int8 import validate_c_int8

    path = tmp_path / "conv.tflite"
    path.write_bytes(conv_tflite(*INT8_CASES[case]))
    for target in ("cortex-m7", "x86-host"):
        result = compile_model(str(path), target)
        assert _reads_input_in_place(result), target
        report = validate_c_int8(result, trials=10, steps=0)
        assert report.ok and all(o.max_abs_err == 0 for o in report.outputs), (target, report)


@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi, newlib and qemu-system-arm")
@pytest.mark.parametrize("case", ["pointwise_odd_channels", "taps_3x3_s2_same",
                                  "generic_3x3_c3_relu6", "generic_2x3_c5_s2"])
def test_helium_matrix_conv_reads_the_nhwc_input_in_place(case: str, tmp_path: Path) -> None:
    """cortex-m55's matrix core (isa/mve: its gathers and int8 scratch) fills from NHWC rows,
    run under QEMU with MVE, bit-exact with TFLite Micro; each fill order once."""
    pytest.importorskip("tflite_micro")
    from opfuse.measure.run.qemu import emulate_c

    path = tmp_path / "conv.tflite"
    path.write_bytes(conv_tflite(*INT8_CASES[case]))
    result = compile_model(str(path), "cortex-m55")
    assert _reads_input_in_place(result)
    emu = emulate_c(result, trials=3, outdir=tmp_path / "board")
    assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), emu.report


def test_a_quantized_float_input_is_read_in_place_after_its_quantize(tmp_path: Path) -> None:
    """A float input is quantized in NHWC: on cortex-m7 and x86-host the conv then reads those
    int8 bytes in place; both bit-exact with TFLite Micro, and neither holds the float input and
    a float copy at once."""
    pytest.importorskip("tflite_micro")
    from opfuse.measure.validate.c_int8 import validate_c_int8

    path = tmp_path / "qstem.tflite"
    path.write_bytes(_quantized_stem(12, 20, seed=3))
    float_bytes = 12 * 20 * 3 * 4
    for target in ("cortex-m7", "x86-host"):
        result = compile_model(str(path), target)
        assert _reads_input_in_place(result), target
        assert result.schedule().plan.peak_bytes < 2 * float_bytes, target
        report = validate_c_int8(result, trials=10, steps=0)
        assert report.ok and all(o.max_abs_err == 0 for o in report.outputs), (target, report)


# x86-host's builds: the portable C (#else), the AVX2 branch, and the host's widest (zmm VNNI
# where it has AVX-512 VNNI)
X86_BUILDS = (["-march=x86-64-v2"], ["-march=x86-64-v3"], ["-march=native"])
X86_CASES = {**INT8_CASES, "short_rows_3x3_c3": (6, 2, 3, 8, 3, 3, 1, "SAME", "relu", 5, True, 11)}


@pytest.mark.parametrize("case", sorted(X86_CASES))
def test_x86_int8_conv_reads_the_nhwc_input_in_place(case: str, tmp_path: Path) -> None:
    """x86-host's int8 conv stages its input from the NHWC graph input (x86/stage.py) and its
    portable C reads it through an NHWC RowSource: no Transpose kernel, and every build of the
    one generated C equals TFLite Micro bit for bit."""
    pytest.importorskip("tflite_micro")
    from opfuse.backends.c import emit_c
    from opfuse.measure.run.host import CModel, build_shared
    from opfuse.measure.validate.source import validate_against_reference

    path = tmp_path / "conv.tflite"
    path.write_bytes(conv_tflite(*X86_CASES[case]))
    result = compile_model(str(path), "x86-host")
    assert _reads_input_in_place(result)
    emit_c(result, tmp_path / "c")
    lone = [k for k in result.partition.without_cascades().kernels if k.ops == ("Transpose",)]
    assert len(lone) == 1  # the output's NCHW -> NHWC, the input's read in place
    c_text = (tmp_path / "c" / "model.c").read_text()
    assert c_text.count(": Transpose (") == 1 and "opfuse_x86_" in c_text
    for flags in X86_BUILDS:
        model = CModel(build_shared(tmp_path / "c", flags, name=f"lib{flags[0][7:]}.so"))
        report = validate_against_reference(result.source, model.run, label=flags[0], seed=0,
                                            trials=6, steps=0)
        assert report.ok and all(o.max_abs_err == 0 for o in report.outputs), (flags, report)


@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi, newlib and qemu-system-arm")
@pytest.mark.parametrize("name,target", [("vww_96_int8", "cortex-m7"), ("mcunet_vww", "cortex-m7"),
                                         ("pretrainedResnet", "cortex-m7"),
                                         ("vww_96_int8", "cortex-m55"),
                                         ("mcunet_vww", "cortex-m55")])
def test_shared_model_on_the_board_without_a_boundary_copy(name: str, target: str,
                                                           tmp_path: Path) -> None:
    """On cortex-m7 and cortex-m55 (Helium's fill gathers a pixel's channels 1 byte apart) under
    QEMU: the same numbers as the reference (int8 bit for bit), no transpose kernel, the arena
    analyze's, and (the int8 models, whose boundary copy set the peak) below the input and its
    copy."""
    from opfuse.measure.run.qemu import emulate_c

    path = SHARED / f"{name}.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), target)
    assert _reads_input_in_place(result)
    emu = emulate_c(result, trials=2, outdir=tmp_path / "board")
    assert emu.report.ok, emu.report
    if name != "pretrainedResnet":
        assert all(o.max_abs_err == 0 for o in emu.report.outputs)
        x = result.optimized.graph.inputs[0]
        assert emu.arena_bytes < 2 * int(np.prod([int(d) for d in x.shape])) * x.dtype.itemsize
    assert "transpose" not in {k.name for k in emu.kernels}
    assert emu.analyzed["peak_arena_bytes"] == emu.arena_bytes


def _int8_stem_then_stride(h: int, w: int, seed: int) -> bytes:
    """``_stem_then_stride`` in int8 with an int8 graph input (vww_96_int8's start)."""
    rng = np.random.default_rng(seed)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, 3), np.int8, 0.02, -7)
    tensors = [x]
    for oc, stride, name in ((16, 1, "relu"), (4, 2, None)):
        ic, x_scale = (3, 0.02) if oc == 16 else (16, 0.05)
        ws = rng.uniform(0.002, 0.02, oc).astype(np.float32)
        wi = q.tensor(m, (oc, 3, 3, ic), np.int8, ws, 0, 0,
                      rng.integers(-127, 128, (oc, 3, 3, ic)).astype(np.int8))
        bi = q.tensor(m, (oc,), np.int32, x_scale * ws, 0, 0,
                      rng.integers(-900, 900, oc).astype(np.int32))
        oh, ow = -(-h // stride), -(-w // stride)
        y = q.tensor(m, (1, oh, ow, oc), np.int8, 0.05, 3)
        q.add_op(m, "CONV_2D", [tensors[-1], wi, bi], [y],
                 q.conv_options((stride, stride), "SAME", name))
        tensors.append(y)
        h, w = oh, ow
    m.inputs, m.outputs = [x], [tensors[-1]]
    return m.build()


@pytest.mark.parametrize("dtype", ["float", "int8"])
def test_the_stem_streams_in_a_cascade_reading_the_input_in_place(dtype: str,
                                                                  tmp_path: Path) -> None:
    """On cortex-m7 the stem reads the NHWC input in place as the first member of a cascade with
    the stride-2 conv (support.why_not_stream: the scalar FPU's pixel tiles, the int8 matrix
    core's fill): neither the input's NCHW copy nor the stem's whole output is in the plan, which
    peaks below both the copy's cascade (no view) and the view layer by layer; the C has the
    reference's numbers (int8: TFLite Micro's, bit for bit)."""
    import dataclasses

    from opfuse.backends.c.support import C_SUPPORT
    from opfuse.fusion import partition
    from opfuse.memory.verify import verify_allocation

    path = tmp_path / "stem2.tflite"
    build = _stem_then_stride if dtype == "float" else _int8_stem_then_stride
    path.write_bytes(build(32, 32, seed=5))
    result = compile_model(str(path), "cortex-m7")
    assert _reads_input_in_place(result)
    (cascade,) = result.partition.cascades
    first = cascade.members[0]
    assert first.ops[:2] == ("Transpose", "Conv")
    plan = result.schedule(cascades=True).plan
    verify_allocation(plan)
    copy = dataclasses.replace(result, partition=partition(result.optimized, result.target,
                                                           support=C_SUPPORT))
    assert copy.partition.cascades  # without the view the copy streams (the old choice)
    assert plan.peak_bytes < copy.schedule(cascades=True).plan.peak_bytes
    assert plan.peak_bytes < result.schedule(cascades=False).plan.peak_bytes
    if dtype == "float":
        report = validate_c(result, outdir=tmp_path / "c")  # LiteRT, its own tolerance
        assert report.ok, report
        return
    pytest.importorskip("tflite_micro")
    from opfuse.measure.validate.c_int8 import validate_c_int8

    report = validate_c_int8(result, trials=6, steps=0)
    assert report.ok and all(o.max_abs_err == 0 for o in report.outputs), report


def test_a_vector_unit_keeps_the_view_layer_by_layer_and_says_why(tmp_path: Path) -> None:
    """x86-host's float cascade members are column tiles over NCHW rows: the stem reading the
    input in place is no member there, and the cascade decision says so."""
    path = tmp_path / "stem2.tflite"
    path.write_bytes(_stem_then_stride(24, 24, seed=5))
    result = compile_model(str(path), "x86-host")
    kernels = result.partition.without_cascades().kernels
    if not _reads_input_in_place(result):
        pytest.skip("x86-host reads this stem's input through a copy")
    assert not any(m.ops[0] == "Transpose" for k in result.partition.cascades for m in k.members)
    reasons = [d.message for d in result.partition.cascade_decisions
               if d.producer == kernels[0].nodes[-1]]
    assert any("NHWC" in r for r in reasons), reasons
