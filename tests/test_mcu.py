"""The generated C on an emulated Cortex-M: cross-compiled with the target's flags and
-Wall -Wextra -Werror, run in QEMU (mps2-an386 / mps2-an500), compared with onnxruntime; the
ELF's footprint; per-kernel instruction counts; ``make run``; bad setups and models too big."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c.board import cflags
from opfuse.backends.c.board.harness import demo_inputs
from opfuse.errors import OpfuseError
from opfuse.measure.run.footprint import footprint
from opfuse.measure.run.host import manifest
from opfuse.measure.run.qemu import emulate_c, parse_output
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model
from opfuse.targets import load_target, parse_target

TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")
needs_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in TOOLS),
    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm",
)
TARGETS = ("cortex-m4", "cortex-m7")
# every board: cortex-m33 (mps2-an505, Secure aliases, its own timer) runs the armv7em ISA module;
# cortex-m55 (mps3-an547: vector table in the ITCM, the SSE-300 system counter) runs the mve
# module (tests/test_mve.py), so the SMLAD-vs-portable test below is the armv7em boards' only
BOARDS = (*TARGETS, "cortex-m33", "cortex-m55")
REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "opfuse", *args],
                          capture_output=True, text=True, env=env, cwd=REPO)


@needs_tools
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["seed_block", "ds_cnn"])
def test_emulated_run_matches_onnxruntime(name: str, target: str, tmp_path: Path) -> None:
    result = compile_model(name, target)
    emu = emulate_c(result, outdir=tmp_path / "c", cascades=False)  # per-kernel counts: layers
    assert emu.report.ok, emu.report
    for out in emu.report.outputs:
        assert out.max_abs_err <= 1e-4 * out.max_ref + 1e-6, out
    assert {"-Wall", "-Wextra", "-Werror"} <= set(cflags(result.target.board))
    assert f"-mcpu={target}" in result.target.board.cflags
    # the arena in the ELF is OPFUSE_ARENA_BYTES, which is analyze's peak
    assert emu.footprint.arena == emu.arena_bytes
    assert emu.analyzed["peak_arena_bytes"] == emu.arena_bytes
    assert emu.footprint.weights >= emu.analyzed["weight_bytes"] - 64  # repacked, same floats
    assert emu.footprint.flash < result.target.board.flash_bytes
    assert emu.footprint.ram < result.target.board.ram_bytes
    # counts: one per kernel, and they add up to the invoke's total (less the marks' own cost)
    counts = [k.instructions for k in emu.kernels]
    assert len(counts) == len(result.partition.without_cascades().kernels)
    assert all(k.predicted_cycles and k.predicted_cycles > 0 for k in emu.kernels)
    assert 0.99 * emu.instructions <= sum(counts) <= emu.instructions
    macs = [_macs(result, i) for i in range(len(counts))]
    # the most instructions go to a kernel with the most MACs (several pointwise convs tie on MACs)
    assert macs[int(np.argmax(counts))] == max(macs)


def _macs(result, index: int) -> int:
    from opfuse.analysis import analyze

    return analyze(result, cascades=False).kernels[index].macs  # the C runs layer by layer


@needs_tools
def test_footprint_reads_the_elf_sections(tmp_path: Path) -> None:
    emu = emulate_c(compile_model("ds_cnn", "cortex-m7"), outdir=tmp_path / "c", cascades=False)
    elf = tmp_path / "c" / "opfuse_mcu.elf"
    again = footprint(elf)
    assert again == emu.footprint
    out = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True)
    sizes = {p[0]: int(p[1]) for p in (line.split() for line in out.stdout.splitlines())
             if len(p) == 3 and p[1].isdigit()}
    assert again.flash + again.harness_inputs == sizes[".text"] + sizes[".rodata"] + sizes.get(
        ".data", 0) + sizes.get(".ARM.exidx", 0)
    assert again.ram == sizes.get(".data", 0) + sizes[".bss"] + sizes[".stack"]


@needs_tools
def test_make_run_in_the_compiled_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    proc = _cli("compile", "ds_cnn", "--target", "cortex-m7", "--emit", "c", "-o", str(folder))
    assert proc.returncode == 0, proc.stderr
    for name in ("startup.c", "board.ld", "harness.c", "inputs.c"):
        assert (folder / name).is_file()
    run = subprocess.run(["make", "-s", "run"], cwd=folder, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    outs, marks, _ = parse_output(run.stdout + run.stderr)  # the console: stdout or stderr
    assert len(marks) == len(compile_model("ds_cnn", "cortex-m7").partition.without_cascades().kernels) + 1
    info = manifest(folder)
    feeds = {x.name: a.reshape(x.shape) for x, a in zip(info.inputs, demo_inputs(info), strict=True)}
    _, ref, _ = reference("ds_cnn", feeds)
    got = np.frombuffer(outs[0], "<f4").reshape(ref["fc"].shape)
    np.testing.assert_allclose(got, ref["fc"], rtol=1e-4, atol=1e-4)


@needs_tools
@pytest.mark.parametrize("target", BOARDS)
def test_model_too_big_for_the_board_is_reported_before_running(target: str) -> None:
    proc = _cli("validate", "mobilenet_v2", "--backend", "c", "--target", target, "--emulate")
    assert proc.returncode == 2
    board = load_target(target).board.name
    assert f"mobilenet_v2 does not fit {board}" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_missing_cross_compiler_names_the_debian_package(tmp_path: Path) -> None:
    proc = _cli("validate", "ds_cnn", "--backend", "c", "--target", "cortex-m7", "--emulate",
                path=str(tmp_path))
    assert proc.returncode == 2
    assert "install the Debian package gcc-arm-none-eabi" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="needs gcc-arm-none-eabi")
def test_missing_qemu_names_the_debian_package(tmp_path: Path) -> None:
    (tmp_path / "arm-none-eabi-gcc").symlink_to(shutil.which("arm-none-eabi-gcc"))
    proc = _cli("validate", "ds_cnn", "--backend", "c", "--target", "cortex-m4", "--emulate",
                path=str(tmp_path))
    assert proc.returncode == 2
    assert "install the Debian package qemu-system-arm" in proc.stderr


def test_emulate_needs_a_board_and_the_c_backend(run_cli) -> None:
    code, _, err = run_cli("validate", "ds_cnn", "--backend", "c", "--emulate")
    assert code == 2 and "has no [board] table" in err
    code, _, err = run_cli("validate", "ds_cnn", "--target", "cortex-m7", "--emulate")
    assert code == 2 and "use it with --backend c" in err


def test_board_table_is_checked(tmp_path: Path) -> None:
    text = (REPO / "opfuse" / "targets" / "cortex-m7.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("timer_hz = 25e6", "timer_hz = 25e6\nflash_kb = 4"))
    with pytest.raises(OpfuseError, match=r"unknown key 'board.flash_kb'"):
        parse_target(bad)
    bad.write_text(text.replace("ram_bytes = 4194304", 'ram_bytes = "4M"'))
    with pytest.raises(OpfuseError, match=r"'board.ram_bytes' must be a 32-bit integer"):
        parse_target(bad)
    assert load_target("x86-host").board is None


SHARED_MOBILENET = REPO.parent / "shared" / "models" / "onnx" / "mobilenet_v2_128_0.5.onnx"


@needs_tools
@pytest.mark.parametrize("target", TARGETS)
def test_small_mobilenet_v2_runs_on_the_board(target: str) -> None:
    """The built-in mobilenet_v2 (224, width 1.0: 14 MB of weights) does not fit the boards
    (tested above); MobileNetV2 at 128x128, width 0.5 does and must match."""
    if not SHARED_MOBILENET.exists():
        pytest.skip("../shared/models not present")
    emu = emulate_c(compile_model(str(SHARED_MOBILENET), target), timeout_s=300)
    assert emu.report.ok, emu.report
    assert emu.footprint.arena == emu.arena_bytes


LOOP_C = r"""#include <stdint.h>
void opfuse_semi_write(const char *text);
@DECL@
__attribute__((noinline)) /* both calls run the same code, whatever the core schedules */
static uint32_t spin(uint32_t n) { /* 1 + 2n instructions between the two timer reads' loads */
    uint32_t t0 = @READ@, t1;
    __asm__ volatile("mov r0, %0\n1:\n\tsubs r0, r0, #1\n\tbne 1b" : : "r"(n) : "r0", "cc");
    t1 = @READ@;
    return t0 - t1; /* both marks count down (board/harness.py: TIMERS) */
}
int main(void) {
    static char line[24];
    uint32_t a, b;
    int i;
@START@    a = spin(1000u);
    b = spin(3000u);
    for (i = 0; i < 8; ++i) line[i] = "0123456789abcdef"[(a >> (28 - 4 * i)) & 15u];
    line[8] = ' ';
    for (i = 0; i < 8; ++i) line[9 + i] = "0123456789abcdef"[(b >> (28 - 4 * i)) & 15u];
    line[17] = '\n';
    opfuse_semi_write(line);
    return 0;
}
"""


@needs_tools
@pytest.mark.parametrize("target", BOARDS)
def test_timer_under_icount_counts_instructions(target: str, tmp_path: Path) -> None:
    """The counting method itself: a loop of 2n instructions, timed with the board's timer under
    -icount, gives 2 x 2000 more instructions for n = 3000 than for n = 1000 (to a tick)."""
    from opfuse.backends.c.board import cflags, ldflags
    from opfuse.backends.c.board.harness import timer_c
    from opfuse.backends.c.board.startup import linker_script, startup_c
    from opfuse.measure.run.qemu import instructions, run_qemu

    board = load_target(target).board
    (tmp_path / "startup.c").write_text(startup_c())
    (tmp_path / "board.ld").write_text(linker_script(board, 4096))
    decl, start, read = timer_c(board.timer_kind, board.timer_base)  # the harness's own counter
    (tmp_path / "loop.c").write_text(LOOP_C.replace("@DECL@", decl).replace("@START@", start)
                                     .replace("@READ@", read))
    cmd = ["arm-none-eabi-gcc", *cflags(board), *ldflags(), "-o", "loop.elf", "startup.c", "loop.c"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text, _ = run_qemu(tmp_path / "loop.elf", board, 60)
    a, b = (int(w, 16) for w in text.split())
    # each reading is a whole tick (0.625 instructions at shift 6): a difference is exact to ~1
    assert abs(instructions(b, board) - instructions(a, board) - 4000) <= 2
    assert 2000 <= instructions(a, board) <= 2006  # the loop, its mov, the second timer load


SHARED_TFLITE = REPO.parent / "shared" / "models" / "tflite"


@needs_tools
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["hello_world_int8", "kws_ref_model", "ad01_int8", "person_detect",
                                  "vww_96_int8", "pretrainedResnet_quant", "mcunet_vww"])
def test_int8_tflite_is_bit_exact_on_the_board(name: str, target: str) -> None:
    """Every int8 model of ../shared/models/tflite on the board against TFLite Micro on the same
    file: no element differs."""
    path = SHARED_TFLITE / f"{name}.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    emu = emulate_c(compile_model(str(path), target), trials=2, cascades=False)
    assert emu.report.ok, emu.report
    assert all(o.max_abs_err == 0 for o in emu.report.outputs)
    assert emu.footprint.arena == emu.arena_bytes
    assert len(emu.kernels) == len(compile_model(str(path), target).partition.without_cascades().kernels)


@needs_tools
@pytest.mark.parametrize("target", [t for t in BOARDS if load_target(t).isa.name == "armv7em"])
def test_int8_dsp_and_portable_paths_agree(target: str, tmp_path: Path) -> None:
    """ad01_int8 (fully connected layers): the __smlad dot product (the default on Cortex-M4/M7/M33)
    and the portable C (-DOPFUSE_NO_DSP) are both bit-exact with TFLite Micro; the DSP build
    contains SMLAD and runs the dense kernels in fewer instructions."""
    path = SHARED_TFLITE / "ad01_int8.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), target)
    runs = {}
    for label, extra in (("dsp", ()), ("portable", ("-DOPFUSE_NO_DSP",))):
        emu = emulate_c(result, trials=2, extra_cflags=extra, outdir=tmp_path / label)
        assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), label
        elf = tmp_path / label / "opfuse_mcu.elf"
        dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)],
                             capture_output=True, text=True).stdout
        assert ("smlad" in dis) == (label == "dsp")
        runs[label] = [k.instructions for k in emu.kernels if "gemm" in k.ops[0].lower()]
    assert runs["dsp"] and all(d < p for d, p in zip(runs["dsp"], runs["portable"], strict=True))


@needs_tools
def test_float_tflite_runs_on_the_board() -> None:
    """A float .tflite is compared with its own reference (LiteRT), not onnxruntime."""
    path = SHARED_TFLITE / "ad01_fp32.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    emu = emulate_c(compile_model(str(path), "cortex-m7"), trials=2)
    assert emu.report.ok, emu.report


@needs_tools
@pytest.mark.parametrize("name", ["kws_ref_model", "vww_96_int8"])
def test_cortex_m33_runs_the_armv7em_kernels_bit_exact(name: str) -> None:
    """cortex-m33 (Armv8-M Mainline + DSP on mps2-an505) is its target file alone: the record
    names the armv7em ISA module, so the C is the matrix core of cortex-m4, and it is bit-exact
    with TFLite Micro from the Secure aliases of the AN505 memory map."""
    path = SHARED_TFLITE / f"{name}.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), "cortex-m33")
    assert result.target.isa == load_target("cortex-m4").isa
    emu = emulate_c(result, trials=2)
    assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), emu.report
    assert emu.board.name == "mps2-an505"


@needs_tools
@pytest.mark.parametrize("name", ["person_detect", "pretrainedResnet_quant"])
def test_cortex_m33_cascades_within_3_percent_of_layer_by_layer(name: str) -> None:
    """Issue 29's cascade must on cortex-m33: the two shared int8 models it streams run no slower
    than 1.03x layer by layer (person_detect 1.014x, pretrainedResnet_quant 1.028x) since it keeps
    rows under 13 columns whole (cascade_min_width; 1.038x both, streaming every width),
    bit-exact, in less RAM."""
    path = SHARED_TFLITE / f"{name}.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), "cortex-m33")
    whole = emulate_c(result, trials=1, cascades=False)
    streamed = emulate_c(result, trials=1, cascades=True)
    assert streamed.report.ok and all(o.max_abs_err == 0 for o in streamed.report.outputs)
    assert streamed.instructions <= 1.03 * whole.instructions, (streamed.instructions,
                                                                whole.instructions)
    assert streamed.arena_bytes < whole.arena_bytes


@needs_tools
@pytest.mark.parametrize("name", ["kws_ref_model", "ad01_int8"])
def test_cortex_m55_runs_bit_exact_on_the_an547(name: str, tmp_path: Path) -> None:
    """cortex-m55 on mps3-an547: the vector table alone in the ITCM (where the core boots), code
    and weights in the FPGA SRAM, the arena in the SSE-300 SRAM (all Secure aliases), counted with
    the system counter; bit-exact with TFLite Micro, with the record's kernels in the ELF."""
    path = SHARED_TFLITE / f"{name}.tflite"
    if not path.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(path), "cortex-m55")
    emu = emulate_c(result, trials=2, outdir=tmp_path / "c")
    assert emu.report.ok and all(o.max_abs_err == 0 for o in emu.report.outputs), emu.report
    assert emu.board.name == "mps3-an547" and emu.instructions > 0
    assert all(k.instructions >= 0 for k in emu.kernels)
    ld = (tmp_path / "c" / "board.ld").read_text()
    assert "VECTORS (rx) : ORIGIN = 0x10000000" in ld
    harness = (tmp_path / "c" / "harness.c").read_text()
    assert "~OPFUSE_TIMER[2]" in harness and "0x58100000" in harness


@needs_tools
def test_cortex_m33_float_cascades_within_3_percent_of_layer_by_layer() -> None:
    """Issue 29's cascade must for float on cortex-m33 (scalar FPU): mobilenet_v2_128_0.5 streamed
    no slower than 1.03x layer by layer (55,524,312 vs 58,090,370 instructions since both run its
    convs as pixel tiles, pixeltiles.py; 61,934,750 vs 75,098,798 with pixel tiles in the members
    only, 78,959,945, 1.051x, with the column tiles), its outputs those of onnxruntime, in the
    arena that makes it fit the part's 786,432 B."""
    if not SHARED_MOBILENET.exists():
        pytest.skip("../shared/models not present")
    result = compile_model(str(SHARED_MOBILENET), "cortex-m33")
    whole = emulate_c(result, trials=1, cascades=False)
    streamed = emulate_c(result, trials=1, cascades=True)
    assert streamed.report.ok, streamed.report
    assert streamed.instructions <= 1.03 * whole.instructions, (streamed.instructions,
                                                                whole.instructions)
    assert streamed.arena_bytes < 0.5 * whole.arena_bytes  # the cascades still pay in RAM
