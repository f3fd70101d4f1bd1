"""ONNX's requantization on an Arm FPU (int8/requant.py, isa/armv7em/depthwise.py ONNX_ROUND):
one VCVTR (FPSCR's round half to even, rintf's mode) where the generator proved the clamps cannot
act (common.py ``Requant.ranged``), the same integers as onnxruntime's definition of the QDQ model
(the integer-sum reference) on the Cortex-M4 board, whose FPv4 has no VRINTX (rintf was a libm
call per value) and the Cortex-M7's; on the Cortex-M55 the matrix and depthwise kernels'
vector output stage in MVE-F (isa/mve/output.py ``requant_onnx``: VCVTNQ)."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from opfuse import api
from opfuse.quantize.data import Samples

BOARD_TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")


def _samples(count: int, seed: int) -> Samples:
    rng = np.random.default_rng(seed)
    return Samples(f"seed {seed}", {"input": rng.standard_normal((count, 1, 1, 49, 10))
                                    .astype(np.float32)}, count)


@pytest.mark.skipif(any(shutil.which(t) is None for t in BOARD_TOOLS),
                    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm")
@pytest.mark.parametrize(("target", "rounds"), [("cortex-m4", "vcvtr.s32.f32"),
                                                ("cortex-m7", "vcvtr.s32.f32"),
                                                ("cortex-m55", "vcvtnq_s32_f32(")])
def test_ranged_onnx_requantization_is_bit_exact_on_the_board(target, rounds, tmp_path,
                                                              run_cli) -> None:
    """ds_cnn (conv, depthwise, pointwise and fully connected kernels) quantized by opfuse: every
    conv and depthwise kernel calls the ranged form, and the board's C is 0 steps from the
    reference."""
    np.savez(tmp_path / "cal.npz", input=_samples(16, 0).arrays["input"])
    out = tmp_path / "c"
    code, _, err = run_cli("compile", "ds_cnn", "--emit", "c", "-o", str(out), "--target", target,
                           "--precision", "int8", "--calibration", str(tmp_path / "cal.npz"),
                           "--io", "int8", "--no-cascades")
    assert code == 0, err
    model_c = (out / "model.c").read_text()
    assert rounds in model_c
    ranged = len(re.findall(r"opfuse_requant_fr\(", model_c))
    clamped = len(re.findall(r"opfuse_requant_f\(", model_c))
    assert ranged >= 5 and clamped <= 2, (ranged, clamped)  # the two helpers' own definitions
    run = api.emulate_c(str(out / "model.qdq.onnx"), target)
    assert run.report.ok and run.report.outputs[0].max_abs_err == 0, run.report.notes
    assert "integer sums" in run.report.notes[0]


def _residual_block(path) -> None:  # noqa: ANN001
    """A float conv - relu - conv + input - relu block (the QLinearAdd of a ResNet)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 8, 3, 3)).astype(np.float32), n)
             for n in ("w1", "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(
        nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 12, 12])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.mark.skipif(any(shutil.which(t) is None for t in BOARD_TOOLS),
                    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm")
@pytest.mark.parametrize("target", ["cortex-m7", "cortex-m55"])
def test_the_inline_qlinearadd_is_bit_exact_on_the_board(target, tmp_path, run_cli) -> None:
    """The QLinearAdd helper inline on an Arm FPU (its products held apart from the sum, so no
    VFMA even at -ffp-contract=fast): a residual block quantized by opfuse is 0 steps from the
    reference on the board, and its C compiled as the board's holds no fused multiply-add."""
    import subprocess

    import onnx

    _residual_block(tmp_path / "block.onnx")
    result = api.compile(str(tmp_path / "block.onnx"), target)
    rng = np.random.default_rng(0)
    cal, ev = (Samples(f"seed {s}", {"x": rng.standard_normal((n, 1, 8, 12, 12))
                                     .astype(np.float32)}, n) for s, n in ((0, 16), (1, 4)))
    done = api.quantize(result, cal, evaluation=ev, io="int8")
    onnx.save(done.proto, tmp_path / "block.qdq.onnx")
    run = api.emulate_c(str(tmp_path / "block.qdq.onnx"), target)
    assert run.report.ok and run.report.outputs[0].max_abs_err == 0, run.report.notes
    code, _, err = run_cli("compile", str(tmp_path / "block.qdq.onnx"), "--emit", "c", "-o",
                           str(tmp_path / "c"), "--target", target)
    assert code == 0, err
    assert "opfuse_qadd_f(" in (tmp_path / "c" / "model.c").read_text()
    flags = {"cortex-m7": ["-mcpu=cortex-m7", "-mfpu=fpv5-d16"], "cortex-m55": ["-mcpu=cortex-m55"]}
    asm = subprocess.run(["arm-none-eabi-gcc", *flags[target], "-mthumb", "-mfloat-abi=hard", "-O2",
                          "-std=c99", "-ffp-contract=fast", "-S", "-o", "-", "model.c"],
                         cwd=tmp_path / "c", capture_output=True, text=True, check=True).stdout
    assert "vdiv.f32" in asm and "vfma" not in asm and "vfms" not in asm
