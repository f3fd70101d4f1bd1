"""Flash and RAM of a cross-compiled model, read from its ELF (``arm-none-eabi-size -A`` for the
sections, ``arm-none-eabi-nm -S`` for the symbols), and the check that a model fits a board
before anything is compiled or run.

Flash = code (.text, .ARM.exidx) + weights (``opfuse_weights``) + other constants (.rodata
less the weights and the harness's inputs) + the .data image. RAM = arena (``opfuse_arena``) +
stack (the linker script's reservation) + other data (.data, .bss less the arena). The harness's
inputs (``opfuse_h_input*``) are in the emulated image only, so they are reported apart.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from opfuse.backends.c.board import stack_bytes
from opfuse.backends.c.manifest import Manifest
from opfuse.errors import OpfuseError
from opfuse.targets import Board


@dataclass(frozen=True)
class Footprint:
    code: int
    weights: int
    constants: int
    data_image: int
    arena: int  # the ELF's opfuse_arena symbol
    stack: int
    other_ram: int
    harness_inputs: int  # in the emulated image's flash only, not in ``flash``

    @property
    def flash(self) -> int:
        return self.code + self.weights + self.constants + self.data_image

    @property
    def ram(self) -> int:
        return self.arena + self.stack + self.other_ram

    def to_json(self) -> dict:
        return {**self.__dict__, "flash": self.flash, "ram": self.ram}


def _tool(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OpfuseError(f"{cmd[0]} failed on {cmd[-1]}: {proc.stderr.strip()[:300]}")
    return proc.stdout


def sections(elf: Path, prefix: str = "arm-none-eabi-") -> dict[str, int]:
    sizes = {}
    for line in _tool([f"{prefix}size", "-A", str(elf)]).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    return sizes


def symbols(elf: Path, prefix: str = "arm-none-eabi-") -> dict[str, int]:
    """Sized symbols: name -> bytes."""
    sizes = {}
    for line in _tool([f"{prefix}nm", "-S", str(elf)]).splitlines():
        parts = line.split()
        if len(parts) == 4:
            sizes[parts[3]] = int(parts[1], 16)
    return sizes


def footprint(elf: Path) -> Footprint:
    sec, sym = sections(elf), symbols(elf)
    if "opfuse_model_invoke" not in sym:
        raise OpfuseError(f"{elf}: no opfuse_model_invoke (not an opfuse model)")
    # --gc-sections drops a weight blob no kernel reads (a model without constants)
    sym.setdefault("opfuse_weights", 0)
    sym.setdefault("opfuse_arena", 0)
    inputs = sum(size for name, size in sym.items() if name.startswith("opfuse_h_input"))
    data = sec.get(".data", 0)
    return Footprint(
        code=sec.get(".text", 0) + sec.get(".ARM.exidx", 0),
        weights=sym["opfuse_weights"],
        constants=sec.get(".rodata", 0) - sym["opfuse_weights"] - inputs,
        data_image=data,
        arena=sym["opfuse_arena"],
        stack=sec.get(".stack", 0),
        other_ram=data + sec.get(".bss", 0) - sym["opfuse_arena"],
        harness_inputs=inputs,
    )


def check_fits(board: Board, info: Manifest, what: str) -> None:
    """Refuse, before compiling, a model whose weights or arena and stack exceed the board."""
    inputs = sum(4 * max(x.size, 1) for x in info.inputs)
    flash = info.weights_bytes + inputs
    ram = info.arena_bytes + stack_bytes(board, info)
    if flash > board.flash_bytes or ram > board.ram_bytes:
        raise OpfuseError(
            f"{what} does not fit {board.name}: needs {flash:,} bytes of flash (weights + inputs; "
            f"board {board.flash_bytes:,}) and {ram:,} bytes of RAM (arena "
            f"{info.arena_bytes:,} + stack; board {board.ram_bytes:,})"
        )


def format_footprint(fp: Footprint, target_name: str, board: Board, analyzed: dict,
                     limits: dict) -> str:
    """The table: ELF figures beside analyze's (``analyzed``: peak arena, weight bytes) and the
    limits of the deployed part (``limits``: flash, ram; from [perf]) and of the board."""
    def n(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    rows = [
        ("flash  code", fp.code, None, None),
        ("       weights", fp.weights, analyzed.get("weight_bytes"), None),
        ("       other constants", fp.constants, None, None),
        ("       .data image", fp.data_image, None, None),
        ("       total", fp.flash, None, "flash"),
        ("RAM    arena", fp.arena, analyzed.get("peak_arena_bytes"), None),
        ("       stack", fp.stack, None, None),
        ("       other data", fp.other_ram, None, None),
        ("       total", fp.ram, None, "ram"),
    ]
    lines = [f"footprint on {target_name} (ELF, bytes)   {'elf':>12} {'analyze':>12} "
             f"{'part limit':>12} {board.name + ' limit':>18}"]
    for label, value, ref, kind in rows:
        part = limits.get(kind) if kind else None
        board_limit = getattr(board, f"{kind}_bytes") if kind else None
        lines.append(f"  {label:<34}{n(value):>12} {n(ref):>12} {n(part):>12} "
                     f"{n(board_limit):>18}")
    lines.append(f"  (harness inputs in the emulated image's flash only: {fp.harness_inputs:,})")
    return "\n".join(lines)
