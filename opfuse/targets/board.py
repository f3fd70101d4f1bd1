"""The ``[board]`` table of a target file: the emulated board the generated C runs on under QEMU
(``opfuse validate --backend c --emulate``, ``make run`` in a ``compile --emit c`` folder).

Schema (every number carries its source in a comment beside it)::

    [board]
    name = "mps2-an500"               # QEMU machine (qemu-system-arm -M NAME)
    cflags = ["-mcpu=cortex-m7", "-mthumb", "-mfpu=fpv5-d16", "-mfloat-abi=hard", "-O2"]
    flash_origin = 0x00000000         # code and constants (the linker script's FLASH region)
    flash_bytes = 4194304
    ram_origin = 0x20000000           # .data, .bss (the arena) and the stack (RAM region)
    ram_bytes = 4194304
    stack_bytes = 16384               # at least; the kernels' stack scratch is added
    timer_hz = 25e6                   # the CMSDK APB timer's clock (per-kernel counts)
    timer_base = 0x40000000           # optional: the counter's registers
    timer_kind = "cmsdk-apb"          # optional: cmsdk-apb (a 32-bit down-counter: CTRL, VALUE,
                                      # RELOAD) or sse-counter (the SSE system counter's control
                                      # frame: CNTCR at +0, a 64-bit up-count CNTCV at +8)
    vector_origin = 0x10000000        # optional: the vector table alone there (the address the
                                      # core boots from), when it is not flash_origin

The board is where the code is *run*; ``[perf]`` describes the part it is *deployed* on (the
footprint is printed against both).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from opfuse.errors import OpfuseError

_WORD = re.compile(r"[A-Za-z0-9_.=+,/:@-]+")  # no space, quote, $, ;, newline
_KEYS = ("name", "cflags", "flash_origin", "flash_bytes", "ram_origin", "ram_bytes",
         "stack_bytes", "timer_hz", "timer_base", "timer_kind", "vector_origin")
_OPTIONAL = {"timer_base": 0x40000000,  # the CMSDK APB timer 0 of the MPS2 images (AN386, AN500)
             "timer_kind": "cmsdk-apb", "vector_origin": None}
TIMER_KINDS = ("cmsdk-apb", "sse-counter")


@dataclass(frozen=True)
class Board:
    name: str  # the QEMU machine
    cflags: tuple[str, ...]  # the target's compiler flags (CPU, FPU, float ABI, optimization)
    flash_origin: int
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    stack_bytes: int
    timer_hz: float
    timer_base: int = 0x40000000  # the CMSDK APB timer the harness reads (CTRL, VALUE, RELOAD)
    timer_kind: str = "cmsdk-apb"  # or "sse-counter": the SSE-300's 64-bit system counter
    vector_origin: int | None = None  # the vector table's own region; None: at flash_origin


def parse_board(table: object, path: Path) -> Board | None:
    """The checked ``[board]`` table, or None when the file has none."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: 'board' must be a table")
    for key in table:
        if key not in _KEYS:
            raise OpfuseError(f"{path}: unknown key 'board.{key}' (known: {', '.join(_KEYS)})")
    table = {**_OPTIONAL, **table}
    for key in _KEYS:
        if key not in table:
            raise OpfuseError(f"{path}: missing key 'board.{key}'")
    name, cflags = table["name"], table["cflags"]
    # both land in the generated Makefile's recipes: shell-inert words only
    if not isinstance(name, str) or not _WORD.fullmatch(name):
        raise OpfuseError(f"{path}: 'board.name' must be a QEMU machine name")
    if not isinstance(cflags, list) or not all(isinstance(f, str) and _WORD.fullmatch(f)
                                               for f in cflags):
        raise OpfuseError(f"{path}: 'board.cflags' must be a list of compiler flags "
                          "(letters, digits and - _ . = + , / : @ only)")
    if table["timer_kind"] not in TIMER_KINDS:
        raise OpfuseError(f"{path}: 'board.timer_kind' must be one of {', '.join(TIMER_KINDS)}; "
                          f"got {table['timer_kind']!r}")
    ints: dict = {"timer_kind": table["timer_kind"], "vector_origin": None}
    for key in ("flash_origin", "flash_bytes", "ram_origin", "ram_bytes", "stack_bytes",
                "timer_base", "vector_origin"):
        value = table[key]
        if key == "vector_origin" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
            raise OpfuseError(f"{path}: 'board.{key}' must be a 32-bit integer >= 0; got {value!r}")
        ints[key] = value
    timer = table["timer_hz"]
    if isinstance(timer, bool) or not isinstance(timer, (int, float)) or not 0 < timer < math.inf:
        raise OpfuseError(f"{path}: 'board.timer_hz' must be a number > 0; got {timer!r}")
    return Board(name=name, cflags=tuple(cflags), timer_hz=float(timer), **ints)
