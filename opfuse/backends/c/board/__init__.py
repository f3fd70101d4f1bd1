"""Board files for a target with a ``[board]`` table (Cortex-M under QEMU): startup.c, board.ld,
harness.c, inputs.c and the Makefile's cross-compile and ``make run`` rules. The same flags and
QEMU arguments serve ``make run`` and ``opfuse validate --backend c --emulate``
(opfuse.measure.run.qemu). See docs/architecture.md for the C backend's files."""

from __future__ import annotations

import numpy as np

from opfuse.backends.c.board.harness import demo_inputs, harness_c, inputs_c
from opfuse.backends.c.board.startup import linker_script, startup_c
from opfuse.backends.c.manifest import Manifest
from opfuse.targets import Board

__all__ = ["ELF", "MCU_SOURCES", "board_files", "cflags", "ldflags", "qemu_args", "stack_bytes"]

ELF = "opfuse_mcu.elf"
MCU_SOURCES = ("startup.c", "harness.c", "inputs.c", "model.c", "weights.c")
STD = ("-std=c99", "-ffp-contract=fast", "-Wall", "-Wextra", "-Werror")
# QEMU -icount shift=6: every instruction advances virtual time by 2**6 = 64 ns, so the 25 MHz
# timer (40 ns a tick) ticks 1.6 times per instruction and a count is exact to one instruction.
ICOUNT_SHIFT = 6


def cflags(board: Board) -> list[str]:
    """The target's flags, C99, warnings as errors, and the per-kernel marks (harness build)."""
    return [*board.cflags, *STD, "-ffunction-sections", "-fdata-sections", "-DOPFUSE_PROFILE"]


def ldflags() -> list[str]:
    return ["-nostartfiles", "-T", "board.ld", "-Wl,--gc-sections",
            "--specs=nano.specs", "--specs=nosys.specs"]


def qemu_args(board: Board, elf: str = ELF) -> list[str]:
    return ["-M", board.name, "-nographic", "-monitor", "none",
            "-semihosting-config", "enable=on,target=native",
            "-icount", f"shift={ICOUNT_SHIFT}", "-kernel", elf]


def stack_bytes(board: Board, info: Manifest) -> int:
    """The board's stack plus the kernels' largest stack scratch (tiles, line buffers)."""
    return board.stack_bytes + (info.stack_scratch_bytes + 7) // 8 * 8


def _makefile(board: Board) -> str:
    return f"""
# Cortex-M ({board.name} under QEMU): `make run` cross-compiles harness.c (inputs.c's arrays in,
# the outputs' float32 bit patterns and per-kernel timer marks out over semihosting) with the
# target's flags and runs it in qemu-system-arm. QEMU counts instructions (-icount), not cycles.
ARM_CC ?= arm-none-eabi-gcc
QEMU ?= qemu-system-arm
MCU_CFLAGS = {' '.join(cflags(board))}
MCU_LDFLAGS = {' '.join(ldflags())}
MCU_SRC = {' '.join(MCU_SOURCES)}

{ELF}: $(MCU_SRC) model.h board.ld
\t$(ARM_CC) $(MCU_CFLAGS) $(MCU_LDFLAGS) -o $@ $(MCU_SRC) -lm

run: {ELF}
\ttimeout 600 $(QEMU) {' '.join(qemu_args(board))}

clean-mcu:
\trm -f {ELF}

.PHONY: run clean-mcu
"""


def _readme(board: Board) -> str:
    return f"""
## On the Cortex-M board ({board.name}, QEMU)

- `startup.c`: vector table, reset handler (enables the FPU, copies .data, zeroes .bss),
  semihosting output and exit. `board.ld`: code and constants in flash
  (0x{board.flash_origin:08x}, {board.flash_bytes:,} bytes), .data, .bss (the arena) and the
  stack in RAM (0x{board.ram_origin:08x}, {board.ram_bytes:,} bytes).
- `harness.c` / `inputs.c`: writes inputs.c's arrays into the arena, invokes once, prints each
  output's float32 bit patterns (hex) and the timer at each kernel boundary (`-DOPFUSE_PROFILE`;
  without it the marks in model.c are empty).

    make run        # needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm

The marks count instructions (QEMU `-icount`), not cycles. Link model.c and weights.c into your
own firmware instead of startup.c and harness.c for a real part.
"""


def board_files(board: Board, info: Manifest, inputs: list[np.ndarray] | None = None,
                what: str = "") -> dict[str, str]:
    """The board files by name; "Makefile+" and "README.md+" are text the caller appends."""
    if inputs is None:
        inputs, what = demo_inputs(info), "seeded standard-normal demo inputs (numpy seed 0)"
    return {
        "startup.c": startup_c(),
        "board.ld": linker_script(board, stack_bytes(board, info)),
        "harness.c": harness_c(info, board.timer_base, board.timer_kind),
        "inputs.c": inputs_c(info, inputs, what),
        "Makefile+": _makefile(board),
        "README.md+": _readme(board),
    }
