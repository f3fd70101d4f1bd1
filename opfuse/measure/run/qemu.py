"""Run the generated C where it deploys: cross-compile it for the target's Cortex-M board
(``[board]`` in the target file), run it in QEMU and compare with onnxruntime on the host.

Steps: check the tools (one line naming the Debian package when one is missing); check that the
weights, the arena and the stack fit the board (before compiling); emit the C with the board
files (opfuse.backends.c.board) and the reference inputs in inputs.c; build with
``arm-none-eabi-gcc`` and the target's flags (-Wall -Wextra -Werror); read the footprint from the
ELF (opfuse.measure.run.footprint); run ``qemu-system-arm -icount`` with a timeout; parse the
outputs' exact bit patterns and the per-kernel timer marks.

Counts: QEMU models no cycle timing. With ``-icount shift=S`` virtual time advances 2**S ns per
instruction executed, and the board's CMSDK timer counts that virtual time, so the timer read
between kernels gives *instructions*, not cycles: ticks x (1e9 / timer_hz) / 2**S. They are
printed beside the cost model's predicted cycles (latency x clock) for comparison only.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from opfuse.analysis import Analysis, analyze
from opfuse.backends.c.board import (
    ELF,
    ICOUNT_SHIFT,
    MCU_SOURCES,
    board_files,
    cflags,
    ldflags,
    qemu_args,
    stack_bytes,
)
from opfuse.backends.c.board.harness import dtype, inputs_c
from opfuse.backends.c.board.startup import linker_script
from opfuse.backends.c.files import rebuilt_by_make
from opfuse.backends.c.manifest import Manifest
from opfuse.compiled import CompileResult
from opfuse.cost import KernelCost
from opfuse.errors import OpfuseError
from opfuse.measure.run.footprint import Footprint, check_fits, footprint, format_footprint
from opfuse.measure.validate.ort import ValidationReport, compare
from opfuse.output import write_file, write_tree
from opfuse.safe_text import for_terminal
from opfuse.targets import Board, Target, list_targets, load_target

CC, QEMU = "arm-none-eabi-gcc", "qemu-system-arm"


@dataclass(frozen=True)
class KernelCount:
    index: int
    name: str
    ops: tuple[str, ...]
    instructions: int  # QEMU -icount: instructions executed, not cycles
    predicted_cycles: float | None  # the cost model's latency x the target's clock
    # its compute + dispatch x the clock (KernelCost.executed_s): what the instructions QEMU
    # counts take, without a memory-bound kernel's wait on the part's memories
    executed_cycles: float | None = None


@dataclass(frozen=True)
class Emulation:
    report: ValidationReport
    target: str
    board: Board
    footprint: Footprint
    analyzed: dict  # analyze's figures: peak_arena_bytes, weight_bytes
    limits: dict  # the deployed part's flash and ram (target [perf]); None where absent
    arena_bytes: int  # OPFUSE_ARENA_BYTES
    kernels: tuple[KernelCount, ...]
    instructions: int  # the whole invoke
    qemu_s: float  # wall time of the QEMU run


def boarded_targets() -> list[str]:
    """The built-in and user targets whose file has a [board] (the emulated ones)."""
    return [n for n in list_targets() if load_target(n).board is not None]


def require_board(target: Target) -> Board:
    if target.board is None:
        raise OpfuseError(f"target '{target.name}' has no [board] table: --emulate runs on a "
                          f"target with an emulated board ({', '.join(boarded_targets())})")
    return target.board


def require_tools() -> None:
    """One line naming the Debian package for the first missing tool (OpfuseError: exit 2)."""
    if shutil.which(CC) is None:
        raise OpfuseError(f"{CC} not found: install the Debian package gcc-arm-none-eabi")
    libc = subprocess.run([CC, "-print-file-name=libc.a"], capture_output=True, text=True)
    if not Path(libc.stdout.strip()).is_absolute():  # gcc echoes the bare name when absent
        raise OpfuseError(f"{CC} has no C library: install the Debian package "
                          "libnewlib-arm-none-eabi")
    if shutil.which(QEMU) is None:
        raise OpfuseError(f"{QEMU} not found: install the Debian package qemu-system-arm")


def build_elf(folder: Path, board: Board, extra: tuple[str, ...] = ()) -> Path:
    cmd = [CC, *cflags(board), *extra, *ldflags(), "-o", ELF, *MCU_SOURCES, "-lm"]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        head = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[:20])
        raise OpfuseError(f"C backend: cross-compiling {folder} for {board.name} failed:\n{head}")
    return folder / ELF


def _words(lines: list[str], start: int, size: int) -> tuple[bytes, int]:
    words: list[int] = []
    i = start
    while 4 * len(words) < size:
        words.extend(int(w, 16) for w in lines[i].split())
        i += 1
    return np.array(words, dtype="<u4").tobytes()[:size], i


def parse_output(text: str) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """(each output's bytes, timer marks, the two calibration marks)."""
    lines = text.splitlines()
    if "OPFUSE-BEGIN" not in lines or "OPFUSE-END" not in lines:
        raise OpfuseError(f"the emulated run printed no complete result:\n{text[-1000:]}")
    i = lines.index("OPFUSE-BEGIN") + 1
    outs: list[bytes] = []
    marks = calib = np.zeros(0, np.uint32)
    while lines[i] != "OPFUSE-END":
        tag, _, size = lines[i].split()
        raw, i = _words(lines, i + 1, int(size))
        if tag == "O":
            outs.append(raw)
        elif tag == "M":
            marks = np.frombuffer(raw, "<u4")
        elif tag == "C":
            calib = np.frombuffer(raw, "<u4")
    return outs, marks, calib


def decode(info: Manifest, outs: list[bytes]) -> dict[str, np.ndarray]:
    """The outputs by name, in their dtype and shape."""
    return {item.name: np.frombuffer(raw, dtype(item)).reshape(item.shape)
            for item, raw in zip(info.outputs, outs, strict=True)}


def run_qemu(elf: Path, board: Board, timeout_s: float) -> tuple[str, float]:
    """The semihosting console text of one run (written through a chardev file)."""
    console = elf.parent / "semihosting.txt"
    args = qemu_args(board, str(elf))
    at = args.index("-semihosting-config") + 1
    args[at] += ",chardev=opfuse_semi"
    cmd = [QEMU, *args, "-chardev", f"file,id=opfuse_semi,path={console}"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise OpfuseError(f"QEMU ({board.name}) did not finish within {timeout_s:g} s "
                          "(raise --timeout)") from None
    wall = time.perf_counter() - t0
    text = console.read_text() if console.exists() else ""
    if proc.returncode != 0:
        raise OpfuseError(f"the emulated run on {board.name} exited {proc.returncode} "
                          f"({'a fault' if 'OPFUSE-FAULT' in text else 'error'}): "
                          f"{(proc.stderr or text).strip()[-500:]}")
    return text, wall


def instructions(ticks: int, board: Board) -> float:
    return ticks * (1e9 / board.timer_hz) / 2**ICOUNT_SHIFT


def kernel_counts(result: CompileResult, marks: np.ndarray, calib: np.ndarray, board: Board,
                  costs: tuple[KernelCost, ...],
                  cascades: bool = True) -> tuple[tuple[KernelCount, ...], int]:
    """Per kernel: instructions between its marks (less one mark's cost) beside the cost
    model's predicted cycles (``costs``: analyze's kernels after fusion, the partition the C
    follows; ``cascades``: the C streams them, see ``emit.c_schedule``)."""
    from opfuse.backends.c.emit import c_schedule

    m = marks.astype(np.int64)
    overhead = int(calib[0]) - int(calib[1]) if len(calib) == 2 else 0
    part = c_schedule(result, True, cascades).partition.kernels  # the kernels the C runs
    perf = result.target.perf
    priced = perf is not None and len(costs) == len(part)
    predicted = [k.latency_s * perf.clock_hz for k in costs] if priced else [None] * len(part)
    executed = [k.executed_s * perf.clock_hz for k in costs] if priced else [None] * len(part)
    counts = tuple(
        KernelCount(i, k.name, tuple(k.ops),
                    round(instructions(max(int(m[i] - m[i + 1]) - overhead, 0), board)),
                    predicted[i], executed[i])
        for i, k in enumerate(part)
    )
    return counts, round(instructions(int(m[0] - m[-1]), board))


def emulate_c(
    result: CompileResult,
    *,
    inputs: Mapping[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    seed: int = 0,
    timeout_s: float = 300.0,
    outdir: Path | str | None = None,
    trials: int = 3,
    extra_cflags: tuple[str, ...] = (),
    cascades: bool = True,
) -> Emulation:
    """Cross-compile ``result``'s C for its target's board, run it in QEMU, compare with
    onnxruntime (a quantized model: with its own reference, ``trials`` seeded inputs) and measure
    the footprint and per-kernel instructions. ``cascades``: false: the C runs the
    partition's kernels layer by layer instead of streaming its cascades (``emit.c_schedule``)."""
    from opfuse.backends.c.emit import generate
    from opfuse.backends.c.int8.requant import is_quantized
    from opfuse.measure.validate.c_float import reference

    board = require_board(result.target)
    require_tools()
    files, info, _ = generate(result, True, cascades=cascades)
    check_fits(board, info, str(result.source))
    if is_quantized(result.optimized) or str(result.source).lower().endswith(".tflite"):
        return _emulate_quantized(result, files, info, board, inputs, seed, trials, timeout_s,
                                  outdir, extra_cflags, cascades)
    feeds, ref, notes = reference(result.source, inputs, seed, result.input_shapes,
                                  result.input_values)
    arrays = [np.asarray(feeds[x.name], np.float32) for x in info.inputs]
    what = "given arrays" if inputs is not None else f"random, seed {seed}: the reference's"
    files["inputs.c"] = board_files(board, info, arrays, what)["inputs.c"]
    with tempfile.TemporaryDirectory(prefix="opfuse-mcu-") as tmp:
        folder = Path(outdir) if outdir is not None else Path(tmp) / "model"
        write_tree(folder, files, manifest="model.json", rebuilt=rebuilt_by_make("opfuse"))
        elf = build_elf(folder, board, extra_cflags)
        fp = footprint(elf)
        text, wall = run_qemu(elf, board, timeout_s)
    outs, marks, calib = parse_output(text)
    got = decode(info, outs)
    checks = [compare(item.name, np.asarray(ref[item.name]),
                      got[item.name].reshape(np.shape(ref[item.name])), rtol, atol)
              for item in info.outputs]
    src = "given arrays" if inputs is not None else f"random (seed {seed})"
    report = ValidationReport(tuple(checks), rtol, atol, src,
                              (*notes, f"generated C on {board.name} (QEMU) vs onnxruntime "
                               "on the original"))
    analysis = analyze(result, cascades=cascades)  # the partition the C it builds follows
    counts, total = kernel_counts(result, marks, calib, board, analysis.kernels, cascades)
    return Emulation(report, result.target.name, board, fp, analyzed(analysis),
                     part_limits(result.target), info.arena_bytes, counts, total, wall)


def _emulate_quantized(result: CompileResult, files: dict, info: Manifest, board: Board,
                       inputs: Mapping[str, np.ndarray] | None, seed: int, trials: int,
                       timeout_s: float, outdir: Path | str | None,
                       extra_cflags: tuple[str, ...], cascades: bool = True) -> Emulation:
    """int8 or .tflite: each trial's inputs compiled into inputs.c and run; compared with the
    source's own reference (TFLite Micro for int8 .tflite: bit-exact; LiteRT for a float one;
    onnxruntime for QDQ ONNX: within one step), as ``validate --backend c`` does on the host."""
    from opfuse.measure.validate.c_int8 import c_label, stepped_reference
    from opfuse.measure.validate.source import validate_against_reference

    tflite = str(result.source).lower().endswith(".tflite")
    last: dict = {}
    with tempfile.TemporaryDirectory(prefix="opfuse-mcu-") as tmp:
        folder = Path(outdir) if outdir is not None else Path(tmp) / "model"
        write_tree(folder, files, manifest="model.json", rebuilt=rebuilt_by_make("opfuse"))

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            arrays = [np.asarray(feeds[x.name]) for x in info.inputs]
            write_file(folder / "inputs.c", inputs_c(info, arrays, "the reference's"))
            elf = build_elf(folder, board, extra_cflags)
            text, last["wall"] = run_qemu(elf, board, timeout_s)
            outs, last["marks"], last["calib"] = parse_output(text)
            last["fp"] = footprint(elf)
            return decode(info, outs)

        report = validate_against_reference(
            result.source, run,
            label=f"{c_label(result, True, info.cascades)} on {board.name} (QEMU)",
            inputs=inputs, seed=seed, trials=trials, steps=0 if tflite else 1,
            reference=None if tflite else stepped_reference(result))
    analysis = analyze(result, cascades=cascades)  # the partition the C it builds follows
    counts, total = kernel_counts(result, last["marks"], last["calib"], board, analysis.kernels,
                                  cascades)
    return Emulation(report, result.target.name, board, last["fp"], analyzed(analysis),
                     part_limits(result.target), info.arena_bytes, counts, total,
                     last["wall"])


def link_footprint(result: CompileResult, cascades: bool = True) -> tuple[Footprint, dict]:
    """(the ELF's footprint, the manifest) without running: linked for a widened copy of the
    target's board, so that a model too big for the board still gives its figures."""
    from opfuse.backends.c.emit import generate

    board = require_board(result.target)
    require_tools()
    files, info, _ = generate(result, True, cascades=cascades)
    half = 0x20000000  # flash from 0, RAM from 0x20000000: up to the peripherals at 0x40000000
    roomy = replace(board, flash_bytes=half - board.flash_origin,
                    ram_bytes=2 * half - board.ram_origin)
    files["board.ld"] = linker_script(roomy, stack_bytes(board, info))
    with tempfile.TemporaryDirectory(prefix="opfuse-mcu-") as tmp:
        folder = Path(tmp) / "model"
        write_tree(folder, files, manifest="model.json", rebuilt=rebuilt_by_make("opfuse"))
        return footprint(build_elf(folder, roomy)), info


def analyzed(analysis: Analysis) -> dict:
    """analyze's figures the footprint is printed beside."""
    verdict = analysis.deployment_json("after")  # what analyze's deployment verdict prints
    return {"peak_arena_bytes": verdict["arena_bytes"], "weight_bytes": verdict["weight_bytes"]}


def part_limits(target: Target) -> dict:
    """The deployed part's RAM (arena) and flash (weights) from [perf]; None where absent."""
    perf = target.perf
    if perf is None:
        return {}
    return {"ram": perf.ram_bytes, "flash": perf.flash_bytes}


def format_counts(emu: Emulation) -> str:
    lines = [
        f"per-kernel counts on {emu.board.name} (QEMU -icount: instructions executed, NOT cycles;"
        f" the cost model predicts cycles on {emu.target}):",
        f"  {'#':>3} {'kernel':<34} {'instructions':>14} {'predicted cycles':>17} {'ratio':>7}",
    ]
    for k in emu.kernels:
        pred = "-" if k.predicted_cycles is None else f"{k.predicted_cycles:,.0f}"
        ratio = ("-" if not k.predicted_cycles else f"{k.instructions / k.predicted_cycles:.2f}")
        lines.append(f"  {k.index:>3} {for_terminal(k.name)[:34]:<34} {k.instructions:>14,} {pred:>17} "
                     f"{ratio:>7}")
    lines.append(f"  invoke total: {emu.instructions:,} instructions "
                 f"(QEMU run {emu.qemu_s:.2f} s wall)")
    return "\n".join(lines)


def format_emulation(emu: Emulation) -> str:
    return (format_footprint(emu.footprint, emu.target, emu.board, emu.analyzed, emu.limits)
            + f"\n  OPFUSE_ARENA_BYTES {emu.arena_bytes:,}; the ELF's opfuse_arena "
            f"{emu.footprint.arena:,}"
            f"{'' if emu.footprint.arena == emu.arena_bytes else ' (DIFFERENT)'}\n"
            + format_counts(emu))
