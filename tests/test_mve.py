"""The mve ISA module (Helium: opfuse/backends/c/isa/mve) on cortex-m55 under QEMU mps3-an547:
the C built with its MVE cores and with them compiled out (-DOPFUSE_NO_MVE: armv7em's SMLAD
kernels, then the portable matrix core reading the same natural-order weights) is bit-exact with
TFLite Micro each time; the MVE build holds VMLADAV and runs its matrix and fully connected
kernels in fewer instructions."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from opfuse.backends.c.int8.conv_mcu import matrix_core
from opfuse.backends.c.isa import kernels
from opfuse.measure.run.qemu import emulate_c
from opfuse.pipeline import compile_model
from opfuse.targets import load_target

REPO = Path(__file__).resolve().parents[1]
SHARED_TFLITE = REPO.parent / "shared" / "models" / "tflite"
CASCADED = ("person_detect",)  # run with its cascades: their members' vector output stages
needs_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm",
)


def test_the_m55_record_selects_the_mve_cores_of_the_matrix_family() -> None:
    isa = load_target("cortex-m55").isa
    assert (isa.name, isa.int8_dot, isa.vector_bits) == ("mve", "mve", 128)
    assert matrix_core(isa)
    ks = kernels(isa)
    assert ks.matrix_core is not None and ks.gemm_core is not None
    assert "__ARM_FEATURE_MVE" in ks.prelude and "arm_mve.h" in ks.prelude
    # the DSP extension's kernels stay: the prelude still defines OPFUSE_DSP
    assert "__ARM_FEATURE_DSP" in ks.prelude
    from opfuse.backends.c.isa.armv7em import matrix as armv7em_matrix

    # cortex-m4 keeps armv7em's own core, the m55 its own
    assert kernels(load_target("cortex-m4").isa).matrix_core is armv7em_matrix.emit_core
    assert ks.matrix_core is not armv7em_matrix.emit_core


def _kernel_counts(emu, kind: str) -> list[int]:  # noqa: ANN001
    return [k.instructions for k in emu.kernels if k.ops and k.ops[0] == kind]


@needs_tools
@pytest.mark.parametrize("name, kind", [("kws_ref_model", "Conv"), ("ad01_int8", "Gemm"),
                                        ("vww_96_int8", "Conv"),  # strides 1 and 2, wide rows
                                        ("pretrainedResnet_quant", "Add"),
                                        ("mcunet_vww", "Conv"),  # 5x5 and 7x7 depthwise
                                        ("person_detect", "Conv")])  # cascaded (CASCADED)
def test_mve_and_fallback_builds_are_bit_exact(name: str, kind: str, tmp_path: Path) -> None:
    path = SHARED_TFLITE / f"{name}.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), "cortex-m55")
    runs = {}
    for label, extra in (("mve", ()), ("no_mve", ("-DOPFUSE_NO_MVE",))):
        emu = emulate_c(result, trials=2, extra_cflags=extra, outdir=tmp_path / label,
                        cascades=name in CASCADED)
        assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), label
        elf = tmp_path / label / "opfuse_mcu.elf"  # MVE decoded only with the architecture named
        dis = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(elf)],
                             capture_output=True, text=True).stdout
        assert ("vmlava" in dis) == (label == "mve"), label  # VMLADAVA's preferred alias
        if kind == "Conv":  # the convs' vector output stage (isa/mve/output.py)
            assert ("vqrdmulh" in dis) == (label == "mve"), label
        runs[label] = _kernel_counts(emu, kind)
    assert runs["mve"] and len(runs["mve"]) == len(runs["no_mve"])
    assert sum(runs["mve"]) < 0.8 * sum(runs["no_mve"]), runs


@needs_tools
def test_the_m55_board_runs_the_armv7em_record_bit_exact(tmp_path: Path) -> None:
    """The baseline the mve module is measured against: cortex-m55's file with cortex-m4's
    [isa] table (the SMLAD kernels, no MVE code in the C) on the same board, bit-exact too."""
    path = SHARED_TFLITE / "kws_ref_model.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    targets = REPO / "opfuse" / "targets"
    m55, m4 = ((targets / f"{t}.toml").read_text() for t in ("cortex-m55", "cortex-m4"))
    target = tmp_path / "cortex-m55-armv7em.toml"
    target.write_text(m55[:m55.index("[isa]")] + m4[m4.index("[isa]"):])
    assert load_target(str(target)).isa == load_target("cortex-m4").isa
    result = compile_model(str(path), str(target))
    emu = emulate_c(result, trials=2, outdir=tmp_path / "c")
    assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), emu.report
    assert "vmladavaq" not in (tmp_path / "c" / "model.c").read_text()
    assert emu.board.name == "mps3-an547"


@needs_tools
def test_the_cascaded_residual_add_runs_in_vectors_bit_exact(tmp_path: Path) -> None:
    """ResNet-8's cascades end in the block's residual Add: the member conv's vector output
    stage takes it (isa/mve/output.py ``residual``, int8/residual.py), bit-exact with TFLite
    Micro, and its int8 convs read the byte scratch (isa/mve/narrow.py: ``vmladavaq_s8``)."""
    path = SHARED_TFLITE / "pretrainedResnet_quant.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    emu = emulate_c(compile_model(str(path), "cortex-m55"), trials=2, outdir=tmp_path / "c",
                    cascades=True)
    assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), emu.report
    text = (tmp_path / "c" / "model.c").read_text()
    assert "vmladavaq_s8(" in text and "vldrwq_gather_base_s32(" in text
    bodies = [b for b in text.split("static void k")[1:] if b.split("(")[0].endswith(
        ("cascade", "cascade_2", "cascade_3"))]
    # the 32- and 16-column blocks (the 8-column one stays whole: cortex-m55's cascade_min_width)
    assert len(bodies) == 2 and all("vshlq_n_s32(vsubq_n_s32(v, " in b for b in bodies)


@needs_tools
def test_person_detect_cascades_within_3_percent_of_layer_by_layer(tmp_path: Path) -> None:
    """Issue 29's cascade must on cortex-m55: the cascaded build no slower than 1.03x layer by
    layer (4,280,076 vs 4,192,517 instructions). Its depthwise members read their folded biases
    from a table (depthwise_quant.folded_biases), each ring member is a function
    (IsaKernels.member_functions), the fill gathers from a ring, and rows under 13 columns stay
    whole (cortex-m55's cascade_min_width): 1.166x before."""
    path = SHARED_TFLITE / "person_detect.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), "cortex-m55")
    whole = emulate_c(result, trials=1, cascades=False)
    streamed = emulate_c(result, trials=1, cascades=True, outdir=tmp_path / "c")
    assert streamed.report.ok and all(o.max_abs_err == 0 for o in streamed.report.outputs)
    assert streamed.instructions <= 1.03 * whole.instructions, (streamed.instructions,
                                                                whole.instructions)
    assert streamed.arena_bytes < 0.5 * whole.arena_bytes  # the cascades still pay in RAM
    assert "static void m0_" in (tmp_path / "c" / "model.c").read_text()


@needs_tools
def test_shared_ring_members_gather_their_fill_bit_exact(tmp_path: Path) -> None:
    """person_detect streamed at every width (cascade_min_width 1): its 6 x 6 blocks' members
    share functions whose ring rows are arguments, and the pointwise ones still fill im2col
    with the MVE gather (isa/mve/narrow.py, ``ch_max``), bit-exact with TFLite Micro."""
    path = SHARED_TFLITE / "person_detect.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    m55 = (REPO / "opfuse" / "targets" / "cortex-m55.toml").read_text()
    target = tmp_path / "cortex-m55-every-width.toml"
    target.write_text(m55.replace("cascade_min_width = 13", "cascade_min_width = 1"))
    emu = emulate_c(compile_model(str(path), str(target)), trials=1, outdir=tmp_path / "c")
    assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), emu.report
    assert "vldrbq_gather_offset_s16(s + ic*arg" in (tmp_path / "c" / "model.c").read_text()
