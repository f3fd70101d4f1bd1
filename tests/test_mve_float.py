"""The mve module's float convs (MVE-F: opfuse/backends/c/isa/mve/floatconv.py, floatdw.py,
floatdirect.py) on cortex-m55 under QEMU mps3-an547, compared with onnxruntime: a stem conv over
three input channels at stride 2, pointwise tiles over planes whose size is not a multiple of
four (the ``vctp32q`` tail) and over a plane the portable 1x1 path shares its weights with,
depthwise rows at strides 1 and 2, 3x3 (also dilated) and 5x5, their padded ends under lane
predicates; each built with the MVE-F kernels and without MVE (``+nomve``: the scalar FPU path
of the same C), layer by layer and streamed in a cascade. The shared float models validate on
both Armv8-M boards."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.measure.run.qemu import emulate_c
from opfuse.pipeline import compile_model

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "models"
SCALAR_FPU = ("-DOPFUSE_NO_MVE", "-mcpu=cortex-m55+nomve")  # the same C, no Helium at all
needs_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm",
)


def _convs(path: Path) -> None:
    """stem 3->8 3x3 s2 over 37x29 (Relu), pw 8->16 over 19x15 (285 pixels: the shared-weight 1x1
    path, Clip 0..6), dw 3x3 s1 (Relu), dw 3x3 s2 -> 10x8, pw 16->8 over 80 pixels, dw 5x5 s1
    (Clip -1..1), dw 3x3 s1 dilated 2 (Relu), dw 3x3 s2 -> 5x4, pw 8->16 over 20 pixels (no
    epilogue)."""
    rng = np.random.default_rng(29)
    nodes, inits = [], []
    shapes = {"x": (3, 37, 29)}

    def conv(name: str, src: str, oc: int, k: int, s: int, group: int, act: str | None,
             d: int = 1) -> str:
        c, h, w = shapes[src]
        icg = c // group
        inits.append(numpy_helper.from_array(
            rng.standard_normal((oc, icg, k, k)).astype(np.float32) * 0.4, f"{name}_w"))
        inits.append(numpy_helper.from_array(
            rng.standard_normal(oc).astype(np.float32) * 0.1, f"{name}_b"))
        p, reach = k // 2 * d, (k - 1) * d + 1
        nodes.append(helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [f"{name}_c"],
                                      kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                                      dilations=[d, d], group=group))
        shapes[f"{name}_c"] = (oc, (h + 2 * p - reach) // s + 1, (w + 2 * p - reach) // s + 1)
        out = f"{name}_c"
        if act == "relu":
            nodes.append(helper.make_node("Relu", [out], [name]))
        elif act is not None:
            lo, hi = act
            inits.append(numpy_helper.from_array(np.float32(lo), f"{name}_lo"))
            inits.append(numpy_helper.from_array(np.float32(hi), f"{name}_hi"))
            nodes.append(helper.make_node("Clip", [out, f"{name}_lo", f"{name}_hi"], [name]))
        if act is not None:
            shapes[name] = shapes[out]
            out = name
        return out

    t = conv("stem", "x", 8, 3, 2, 1, "relu")
    t = conv("pw1", t, 16, 1, 1, 1, (0.0, 6.0))
    t = conv("dw1", t, 16, 3, 1, 16, "relu")
    t = conv("dw2", t, 16, 3, 2, 16, None)
    t = conv("pw2", t, 8, 1, 1, 1, None)
    t = conv("dw3", t, 8, 5, 1, 8, (-1.0, 1.0))
    t = conv("dw4", t, 8, 3, 1, 8, "relu", d=2)
    t = conv("dw5", t, 8, 3, 2, 8, None)
    t = conv("pw3", t, 16, 1, 1, 1, None)
    graph = helper.make_graph(
        nodes, "mve_float_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *shapes["x"]])],
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, *shapes[t]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)


def _disassembly(elf: Path) -> str:
    return subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)],
                          capture_output=True, text=True).stdout


@needs_tools
def test_mve_float_convs_match_onnxruntime_with_and_without_helium(tmp_path: Path) -> None:
    path = tmp_path / "convs.onnx"
    _convs(path)
    result = compile_model(str(path), "cortex-m55")
    counts = {}
    for label, extra in (("mve", ()), ("scalar_fpu", SCALAR_FPU)):
        emu = emulate_c(result, extra_cflags=extra, outdir=tmp_path / label, cascades=False)
        assert emu.report.ok, (label, emu.report)
        text = (tmp_path / label / "model.c").read_text()
        assert text.count("#ifdef OPFUSE_MVEF") == 9  # every conv of the model took the kernels
        dis = _disassembly(tmp_path / label / "opfuse_mcu.elf")
        assert ("vfma.f32\tq" in dis) == (label == "mve"), label  # VFMA of a vector by a scalar
        counts[label] = [k.instructions for k in emu.kernels]
    assert sum(counts["mve"]) < 0.5 * sum(counts["scalar_fpu"]), counts


@needs_tools
def test_mve_float_cascade_members_match_onnxruntime(tmp_path: Path) -> None:
    """The convs streamed: pw1 -> dw1 (stride 1) -> dw2 (stride 2) cascade over 15-column rows
    (a vector's tail under predicates), the depthwise members functions of their own, row by row
    over the channels (floatdw._member_rows), with and without Helium."""
    path = tmp_path / "convs.onnx"
    _convs(path)
    result = compile_model(str(path), "cortex-m55")
    for label, extra in (("mve", ()), ("scalar_fpu", SCALAR_FPU)):
        emu = emulate_c(result, extra_cflags=extra, outdir=tmp_path / label)
        assert emu.report.ok, (label, emu.report)
        text = (tmp_path / label / "model.c").read_text()
        assert [k.name for k in emu.kernels].count("cascade") == 1
        calls = [line for line in text.splitlines() if line.strip().startswith("m")
                 and "(a, b, " in line]
        assert len(calls) == 2, calls  # the cascade's depthwise members, each its own function
        assert text.count("for (int c = 0; c < 16; ++c, r0 += d0") == 2  # dw1, dw2 row by row


@needs_tools
@pytest.mark.parametrize("target", ["cortex-m55", "cortex-m33"])
@pytest.mark.parametrize("model", ["onnx/mobilenet_v2_128_0.5.onnx", "tflite/vww_96_float.tflite"])
def test_the_float_models_validate_on_the_armv8m_boards(model: str, target: str,
                                                        tmp_path: Path) -> None:
    path = SHARED / model
    if not path.exists():
        pytest.skip("../shared/models not present")
    emu = emulate_c(compile_model(str(path), target), outdir=tmp_path / "c", timeout_s=900)
    assert emu.report.ok, emu.report
    if target == "cortex-m55":  # the MVE-F kernels hold its pointwise and depthwise convs (a
        # kernel function of a shape that repeats is written once)
        assert (tmp_path / "c" / "model.c").read_text().count("#ifdef OPFUSE_MVEF") >= 15


@needs_tools
def test_mobilenet_v2_cascades_within_3_percent_of_layer_by_layer() -> None:
    """Issue 29's cascade must for float on cortex-m55: mobilenet_v2_128_0.5 streamed no slower
    than 1.03x layer by layer (14,658,101 vs 14,422,398 instructions; 15,015,808 before its
    depthwise members were functions of their own, row by row: floatdw._member_rows) and in
    less RAM."""
    path = SHARED / "onnx" / "mobilenet_v2_128_0.5.onnx"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), "cortex-m55")
    whole = emulate_c(result, cascades=False, timeout_s=900)
    streamed = emulate_c(result, cascades=True, timeout_s=900)
    assert streamed.report.ok, streamed.report
    assert streamed.instructions <= 1.03 * whole.instructions, (streamed.instructions,
                                                                whole.instructions)
    assert streamed.arena_bytes < 0.5 * whole.arena_bytes  # the cascades still pay in RAM
