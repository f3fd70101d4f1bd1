"""The Cortex-M int8 matrix kernels (opfuse/backends/c/int8/conv_mcu.py, im2col.py, isa/armv7em/matrix.py)
against TFLite Micro, bit for bit: one-op .tflite files (tests/helpers/tflite_builder.py) compiled for
cortex-m7, built and run on the host (the portable C of the same kernels, same weight layout) on 20
seeded inputs; then the DSP build and the -DOPFUSE_NO_DSP build under QEMU on both boards."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

from tests.helpers import qgraphs as q  # noqa: E402
from tests.helpers import tflite_builder as tb  # noqa: E402
from tests.helpers.mcu_convs import CONV_CASES, conv_tflite  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models" / "tflite"


def fc_tflite(k: int, n: int, zx: int, per_channel: bool, act: str | None, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    ws = rng.uniform(0.002, 0.02, n if per_channel else 1).astype(np.float32)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, k), np.int8, 0.03, zx)
    wt = rng.integers(-127, 128, (n, k)).astype(np.int8)
    wi = q.tensor(m, wt.shape, np.int8, ws, 0, 0, wt)
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    bi = q.tensor(m, (n,), np.int32, 0.03 * np.broadcast_to(ws, (n,)), 0, 0, bias)
    y = q.tensor(m, (1, n), np.int8, 0.11, -4)
    q.add_op(m, "FULLY_CONNECTED", [x, wi, bi], [y], q.fc_options(act))
    m.inputs, m.outputs = [x], [y]
    return m.build()


# (K, N, z_x, per-channel, act, seed): K not a multiple of 4, N not a multiple of the 4-row tile
FC_CASES = {
    "k37_n10": (37, 10, 7, True, None, 21),
    "k64_n5_zx_min": (64, 5, -128, False, "relu", 22),
    "k3_n4_zx_max": (3, 4, 127, True, None, 23),
    # the 4-row assembly core (isa/armv7em/dot.py: dot_quads): 8 steps a pass with one requantization
    # for every row (literals), 4 steps a pass with per-row arrays
    "k64_n8_quads_per_tensor": (64, 8, -128, False, "relu", 24),
    "k36_n12_quads_per_channel": (36, 12, 9, True, None, 25),
}


def _host_bit_exact(tmp_path: Path, data: bytes) -> None:
    from opfuse.measure.validate.c_int8 import validate_c_int8
    from opfuse.pipeline import compile_model

    path = tmp_path / "op.tflite"
    path.write_bytes(data)
    report = validate_c_int8(compile_model(str(path), "cortex-m7"), trials=20, steps=0)
    assert report.ok, report
    assert all(o.max_abs_err == 0 for o in report.outputs), report


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_mcu_conv_matches_tflite_micro(case: str, tmp_path: Path) -> None:
    _host_bit_exact(tmp_path, conv_tflite(*CONV_CASES[case]))


@pytest.mark.parametrize("case", sorted(FC_CASES))
def test_mcu_fully_connected_matches_tflite_micro(case: str, tmp_path: Path) -> None:
    _host_bit_exact(tmp_path, fc_tflite(*FC_CASES[case]))


def test_cortex_m_targets_get_the_matrix_kernels(tmp_path: Path) -> None:
    """The host keeps conv.py's kernels; cortex-m4/m7 C has the matrix core's SMLAD loop (its
    assembly: isa/armv7em/matrix.py: _asm_quads)."""
    from opfuse.backends.c.emit import generate
    from opfuse.pipeline import compile_model

    path = tmp_path / "op.tflite"
    path.write_bytes(conv_tflite(*CONV_CASES["taps_3x3_s2_same"]))
    for target, want in (("x86-host", False), ("cortex-m4", True), ("cortex-m7", True)):
        files, _, _ = generate(compile_model(str(path), target))
        assert ("smlad %[a0_0], %[xl], %[wl]" in files["model.c"]) == want, target


def _group(node) -> int:  # noqa: ANN001
    attr = node.attributes.get("group")
    return 1 if attr is None else int(attr.value)


TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm", "arm-none-eabi-objdump")


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                    reason="needs gcc-arm-none-eabi, newlib and qemu-system-arm")
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_mcu_dsp_and_portable_kernels_agree(target: str, tmp_path: Path) -> None:
    """kws_ref_model (a 10x4 im2col'd conv, 1x1 convs, a fully connected layer) on the board:
    the SMLAD build and the -DOPFUSE_NO_DSP build are both bit-exact with TFLite Micro, and the
    DSP build runs every conv and Gemm kernel in fewer instructions."""
    from opfuse.measure.run.qemu import emulate_c
    from opfuse.pipeline import compile_model

    path = SHARED / "kws_ref_model.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), target)
    nodes = {n.name: n for n in result.optimized.graph}
    matrix = {k.name for k in result.partition.without_cascades().kernels  # not depthwise
              if nodes[k.nodes[0]].op_type in ("Conv", "Gemm")
              and _group(nodes[k.nodes[0]]) == 1}
    runs = {}
    for label, extra in (("dsp", ()), ("portable", ("-DOPFUSE_NO_DSP",))):
        emu = emulate_c(result, trials=2, extra_cflags=extra, outdir=tmp_path / label)
        assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), label
        dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(tmp_path / label /
                                                                  "opfuse_mcu.elf")],
                             capture_output=True, text=True).stdout
        assert ("smlad" in dis) == (label == "dsp")
        runs[label] = [k.instructions for k in emu.kernels if k.name in matrix]
    assert len(runs["dsp"]) == 6  # kws: five convs (one 10x4, four 1x1 ones) and the Gemm
    assert all(d < p for d, p in zip(runs["dsp"], runs["portable"], strict=True))


@pytest.mark.parametrize("case", ["kws_ref_model", "pretrainedResnet_quant", "ad01_int8"])
def test_mcu_kernels_sanitizers(case: str, tmp_path: Path) -> None:
    """The cortex-m7 C (its portable path: the host has no DSP extension) built with ASan and
    UBSan runs clean and bit-exact with TFLite Micro, layer by layer and cascaded: every im2col
    order, the stack and arena scratch, the Gemm; -Wall -Wextra -Werror -std=c99 as always."""

    from opfuse.backends.c import emit_c
    from opfuse.measure.run.host import build_executable, manifest, run_executable
    from opfuse.measure.validate.tflite_reference import TfliteReference
    from opfuse.pipeline import compile_model

    path = SHARED / f"{case}.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), "cortex-m7")
    ref = TfliteReference(path)
    for cascades in (False, True):
        folder = tmp_path / f"m{int(cascades)}"
        emit_c(result, folder, cascades=cascades)
        assert "im2col quads" in (folder / "model.c").read_text() or case == "ad01_int8"
        exe = build_executable(folder, ["-O1", "-g", "-fsanitize=address,undefined",
                                        "-fno-sanitize-recover=undefined"], name="asan")
        info = manifest(folder)
        feeds = ref.random_inputs(0)
        got, proc = run_executable(exe, info, feeds, env={"ASAN_OPTIONS": "detect_leaks=0"})
        assert "runtime error" not in proc.stderr, proc.stderr[-2000:]
        for k, v in ref.run(feeds).items():
            assert np.array_equal(got[k].reshape(v.shape), v), (k, cascades)
