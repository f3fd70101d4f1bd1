"""The int8 depthwise kernel (opfuse/backends/c/int8/depthwise_dsp.py) on both emulated boards:
its SXTB16/SMLAD path (the default on Cortex-M4/M7) and its portable C (-DOPFUSE_NO_DSP) are each
bit-exact with TFLite Micro on a chain of 3x3 stride 1, 5x5 stride 2 and 7x7 stride 1 depthwise
layers with odd channel counts, and the DSP build holds the SIMD instructions and runs them in
fewer instructions."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

from opfuse.measure.run.qemu import emulate_c  # noqa: E402
from opfuse.pipeline import compile_model  # noqa: E402
from tests.helpers import qgraphs as q  # noqa: E402
from tests.helpers import tflite_builder as tb  # noqa: E402

needs_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm",
)


CHAIN = ((3, 1, "relu6", -128), (5, 2, None, 7), (7, 1, "relu", -128))


def depthwise_chain(path: Path, c: int = 5, h: int = 19, w: int = 23,
                    layers: tuple = CHAIN) -> Path:
    """x -> dw 3x3 s1 (relu6) -> dw 5x5 s2 -> dw 7x7 s1 (relu) (``layers``: (k, stride,
    activation, output zero point) each), SAME padding, int8."""
    rng = np.random.default_rng(3)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, c), np.int8, 0.05, -128)
    first, cur, (ch, cw) = x, x, (h, w)
    for k, s, act, zy in layers:
        ws = rng.uniform(0.002, 0.02, c).astype(np.float32)
        wt = rng.integers(-127, 128, (1, k, k, c)).astype(np.int8)
        wi = q.tensor(m, wt.shape, np.int8, ws, 0, 3, wt)
        bi = q.tensor(m, (c,), np.int32, 0.05 * ws, 0, 0,
                      rng.integers(-3000, 3000, c).astype(np.int32))
        ch, cw = -(-ch // s), -(-cw // s)
        y = q.tensor(m, (1, ch, cw, c), np.int8, 0.05, zy)
        q.add_op(m, "DEPTHWISE_CONV_2D", [cur, wi, bi], [y], q.dw_options((s, s), "SAME", 1, act,
                                                                         (1, 1)))
        cur = y
    m.inputs, m.outputs = [first], [cur]
    path.write_bytes(m.build())
    return path


@needs_tools
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_depthwise_dsp_and_portable_paths_agree(target: str, tmp_path: Path) -> None:
    result = compile_model(str(depthwise_chain(tmp_path / "dw.tflite")), target)
    runs = {}
    for label, extra in (("dsp", ()), ("portable", ("-DOPFUSE_NO_DSP",))):
        emu = emulate_c(result, trials=3, extra_cflags=extra, outdir=tmp_path / label)
        assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), label
        dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(tmp_path / label /
                                                                 "opfuse_mcu.elf")],
                             capture_output=True, text=True).stdout
        assert ("sxtb16" in dis and "smlabb" in dis) == (label == "dsp")
        runs[label] = [k.instructions for k in emu.kernels if "conv" in k.ops[0].lower()]
    assert len(runs["dsp"]) == 3
    assert all(d < p for d, p in zip(runs["dsp"], runs["portable"], strict=True)), runs


@needs_tools
def test_narrower_layer_reads_the_wider_zero_row(tmp_path: Path) -> None:
    """A stride-2 layer halves the rows; the next layer of the same input zero point reads the
    first layer's row of zero points (one row in weights.c, not two) and stays bit-exact with
    TFLite Micro on the DSP path."""
    layers = ((3, 2, "relu6", -128), (3, 1, None, -128), (3, 1, None, 5))
    result = compile_model(str(depthwise_chain(tmp_path / "dw.tflite", 6, 17, 29, layers)),
                           "cortex-m7")
    emu = emulate_c(result, trials=3, outdir=tmp_path / "dsp")
    assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs)
    assert len([k for k in emu.kernels if "conv" in k.ops[0].lower()]) == 3
