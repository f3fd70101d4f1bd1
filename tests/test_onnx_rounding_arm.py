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
