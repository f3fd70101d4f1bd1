"""The ``[isa]`` table of a target file: what the generated C's kernels are tiled for, read into
one frozen record (docs/isa.md). The C backend's kernels read only this record for every choice
that depends on the instruction set; the C itself is guarded by the compiler's own feature macros
(written by the ISA's module, ``opfuse/backends/c/isa/<name>.py``), so one generated project still
builds and runs on any compiler, with the portable C as the fallback.

Schema (every field optional; a target file without ``[isa]`` gets the portable record)::

    [isa]
    name = "armv7em"              # the micro-kernel module: portable | armv7em | x86
    vector_bits = 0               # widest vector the float kernels are tiled for; 0: a scalar FPU
    vector_registers = 32         # registers of that file (32 single-precision FPU registers here)
    int8_dot = "smlad"            # widen | smlad | vnni | mve (below)
    matmul_tile = [4, 4]          # the float MatMul core's register tile, rows x columns
    softmax_lanes = 8             # partial maxima and sums per softmax row
    depthwise_rows = false        # the module writes a float depthwise conv's rows in vectors

``int8_dot``: how an int8 product is summed. ``widen``: each 8-bit product in a 32-bit lane, as a
compiler vectorizes portable C; ``smlad``: Armv7E-M's SMLAD, two 16x16 products per instruction on
SXTB16-widened pairs (Arm ARMv7-M Architecture Reference Manual, A7.7.129 and A7.7.178), which the
im2col matrix core (int8/conv_mcu.py) is built on; ``vnni``: x86 VPDPBUSD, four u8 x s8 products
summed into each 32-bit lane (Intel SDM vol. 2, VPDPBUSD); ``mve``: Armv8.1-M Helium's VMLADAV,
8 int16 or 16 int8 products summed into one 32-bit scalar per instruction (Armv8.1-M ARM,
VMLADAV), on which the same im2col matrix family runs with the mve module's cores.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from pathlib import Path

from opfuse.errors import OpfuseError

NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")  # a module of opfuse/backends/c/isa checks it is one
INT8_DOTS = ("widen", "smlad", "vnni", "mve")


@dataclass(frozen=True)
class Isa:
    name: str = "portable"
    vector_bits: int = 128
    vector_registers: int = 16
    int8_dot: str = "widen"
    matmul_tile: tuple[int, int] = (4, 16)
    softmax_lanes: int = 32
    # the module's IsaKernels.depthwise_float writes a float depthwise conv's rows in vectors, read
    # in place; the float plan (kernelplan.convf.depthwise_vectors) reads it for the emitter and
    # the cost alike
    depthwise_rows: bool = False

    @property
    def scalar(self) -> bool:
        """A scalar FPU: float kernels tile for registers (small panels, sums in named scalars,
        rows read in place), not for vectors a compiler fills."""
        return self.vector_bits == 0


PORTABLE = Isa()
_FIELDS = {f.name: f for f in fields(Isa)}


def _count(path: Path, key: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise OpfuseError(f"{path}: 'isa.{key}' must be an integer in [{lo}, {hi}]; got {value!r}")
    return value


def parse_isa(table: object, path: Path) -> Isa:
    """The record of ``[isa]`` (``PORTABLE`` without one); each bad key or value names the file."""
    if table is None:
        return PORTABLE
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: 'isa' must be a table")
    for key in table:
        if key not in _FIELDS:
            raise OpfuseError(f"{path}: unknown key 'isa.{key}' (known: {', '.join(_FIELDS)})")
    got = dict(table)
    if "name" in got and not (isinstance(got["name"], str) and NAME.fullmatch(got["name"])):
        raise OpfuseError(f"{path}: 'isa.name' must be a lower-case identifier (an ISA module's "
                          f"name: portable, armv7em, x86); got {got['name']!r}")
    if "int8_dot" in got and got["int8_dot"] not in INT8_DOTS:
        raise OpfuseError(f"{path}: 'isa.int8_dot' must be one of {', '.join(INT8_DOTS)}; "
                          f"got {got['int8_dot']!r}")
    if "vector_bits" in got:
        bits = _count(path, "vector_bits", got["vector_bits"], 0, 2048)
        if bits and (bits < 64 or not math.log2(bits).is_integer()):
            raise OpfuseError(f"{path}: 'isa.vector_bits' must be 0 or a power of two >= 64; "
                              f"got {bits}")
    for key, hi in (("vector_registers", 256), ("softmax_lanes", 256)):
        if key in got:
            _count(path, key, got[key], 1, hi)
    if "depthwise_rows" in got and not isinstance(got["depthwise_rows"], bool):
        raise OpfuseError(f"{path}: 'isa.depthwise_rows' must be true or false; "
                          f"got {got['depthwise_rows']!r}")
    if "matmul_tile" in got:
        tile = got["matmul_tile"]
        if not isinstance(tile, list) or len(tile) != 2:
            raise OpfuseError(f"{path}: 'isa.matmul_tile' must be [rows, columns]; got {tile!r}")
        got["matmul_tile"] = tuple(_count(path, "matmul_tile", v, 1, 64) for v in tile)
    return Isa(**got)
