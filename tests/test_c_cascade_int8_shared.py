"""Cascaded int8 C on every shared int8 .tflite with cascades: bit-identical to TFLite Micro on
seeded inputs (x86-host's partition), and on cortex-m7 OPFUSE_ARENA_BYTES is analyze's peak
with cascades (int8), at most the layer-by-layer one (docs/architecture.md, "Cascades")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("tflite_micro")
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

from opfuse.analysis import analyze  # noqa: E402
from opfuse.api import compile  # noqa: E402
from opfuse.backends.c import emit_c  # noqa: E402
from opfuse.measure.validate.tflite_reference import TfliteReference  # noqa: E402
from tests.helpers.c_cascade import arena_of, bit_exact, run_cascaded  # noqa: E402
from tests.helpers.cascade import streaming  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tflite"


def _shared() -> list[str]:
    if not SHARED.is_dir():
        return []
    return [p.stem for p in sorted(SHARED.glob("*.tflite"))
            if TfliteReference(p).kind == "tflite-micro"]


MODELS = _shared()


@pytest.mark.parametrize("name", MODELS or ["none"])
def test_shared_int8_model_cascaded_is_bit_exact(name: str, tmp_path: Path) -> None:
    if not MODELS:
        pytest.skip("../shared/models not present")
    path = SHARED / f"{name}.tflite"
    if not compile(path, streaming()).partition.cascades:
        pytest.skip(f"{name}: no cascades on x86-host")  # the MLPs (ad01, hello_world)
    run_cascaded(path, tmp_path / "c")
    bit_exact(path, tmp_path / "c")


@pytest.mark.parametrize("name", MODELS or ["none"])
def test_shared_int8_model_arena_is_analyze_peak_on_cortex_m7(name: str, tmp_path: Path) -> None:
    if not MODELS:
        pytest.skip("../shared/models not present")
    path = SHARED / f"{name}.tflite"
    result = compile(path, "cortex-m7")
    if not result.partition.cascades:
        pytest.skip(f"{name}: no cascades on cortex-m7")
    _, emitted = run_cascaded(path, tmp_path / "c", "cortex-m7")
    analysis = analyze(result)
    assert analysis.precision == "int8"
    assert emitted.arena_bytes == arena_of(tmp_path / "c") \
        == analysis.after.plan.peak_bytes == analysis.deployment_json("after")["arena_bytes"]
    layered = emit_c(result, tmp_path / "plain", cascades=False)  # --no-cascades
    assert layered.arena_bytes == analyze(result, cascades=False).after.plan.peak_bytes
    assert emitted.arena_bytes <= layered.arena_bytes
    if name == "person_detect":  # its peak is inside a cascade: 55,296 -> 23,424 bytes
        assert emitted.arena_bytes < layered.arena_bytes


@pytest.mark.skipif(any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm")
def test_cascaded_int8_model_on_the_emulated_board() -> None:
    """person_detect's cascaded C on the cortex-m7 board: bit-exact with TFLite Micro, and the
    ELF's arena is analyze's cascaded peak, below the layer-by-layer arena."""
    if not (SHARED / "person_detect.tflite").is_file():
        pytest.skip("../shared/models not present")
    from opfuse.measure.run.qemu import emulate_c

    result = compile(SHARED / "person_detect.tflite", "cortex-m7")
    emu = emulate_c(result, trials=1, cascades=True)
    assert emu.report.ok, "\n".join(emu.report.notes)
    assert all(o.max_abs_err == 0 for o in emu.report.outputs)
    assert emu.footprint.arena == emu.arena_bytes == analyze(result).after.plan.peak_bytes
    assert emu.arena_bytes < analyze(result, cascades=False).after.plan.peak_bytes
    # the per-kernel counts follow the kernels the cascaded C runs, fewer than layer by layer
    assert len(emu.kernels) < len(result.partition.without_cascades().kernels)
