"""The ``[perf]`` table of a target file, parsed into frozen, typed data for the cost model.

Schema (every number in a target file carries its source in a comment beside it)::

    [perf]
    clock_hz = 180e6
    ram_bytes = 262144                 # what the activation arena must fit into ("fits")
    flash_bytes = 2097152              # optional: what the weights must fit into; absent: unknown
    dispatch_overhead_s = 2e-6         # per kernel call / launch
    peak_macs_per_s = { int8 = 3.6e8, fp32 = 6e7 }   # one entry per precision the target runs
    pj_per_mac = { int8 = 0.23, fp32 = 4.6 }         # the same precisions
    [[perf.memory]]                    # one table per level, innermost (fastest) first
    name = "sram"
    size_bytes = 196608
    read_bytes_per_s = 7.2e8
    write_bytes_per_s = 7.2e8          # 0 for a read-only level (flash)
    pj_per_byte = 2.5
    holds = ["activations"]            # "activations" and/or "weights"
    [perf.efficiency]                  # optional: attainable fraction of peak per kernel class
    conv = 0.8                         # absent class (or absent table): 1.0
    depthwise = 0.25

Level model (used by ``opfuse.cost``): activations live in the innermost level that holds
activations and is at least as large as the planned arena, else in the outermost level that holds
activations. Weights are read from the innermost level that holds weights and is at least as large
as the model's weights (plus the arena, when the level holds activations too: both stay resident
across repeated inferences), else from the outermost level that holds weights. A cache level says
``holds = ["activations", "weights"]``; an MCU's SRAM that TFLite Micro never copies weights into
says ``["activations"]``.

Efficiency (used by ``opfuse.cost``): compute time = FLOPs / (2 x peak MAC/s x efficiency[class]),
where the class is that of the kernel's anchor, else its first op (``opfuse.cost.kclass``):
``conv`` (dense k x k, grouped), ``conv1x1``, ``depthwise``, ``gemm`` (Gemm, MatMul), ``pool``
(windowed MaxPool/AveragePool), ``reduce`` (global pools, Reduce*, Softmax, LayerNormalization),
``elementwise`` (unary and broadcasting arithmetic, BatchNormalization), ``movement`` (reshape,
concat, pad, ...), ``other``. Each value is in (0, 1]; a class the table omits runs at 1.0.

``[perf.int8c]`` (optional, ``opfuse.targets.int8c``): how fast opfuse's own generated int8 C
runs on the target, per C template path, written by ``opfuse calibrate`` for ``host``; a quantized
model is then costed as that C (``opfuse.cost.int8c``). Absent: as before.

``[perf.floatc]`` (optional, the same schema keyed by ``FLOAT_PATHS``): opfuse's own float C on
the target, per path of ``opfuse.kernelplan.convf`` and class of the other kernels, written by
``benchmarks/mcu_calibrate.py --float`` for the Cortex-M targets; a float model is then costed as
that C (``opfuse.cost.floatc``). Absent: FLOPs at the fp32 peak x ``[perf.efficiency]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from opfuse.errors import OpfuseError
from opfuse.targets.int8c import FLOAT_PATHS, Int8C, parse_int8c
from opfuse.targets.npu import NpuModel, parse_npu

HOLDS = ("activations", "weights")
KERNEL_CLASSES = (
    "conv",
    "conv1x1",
    "depthwise",
    "gemm",
    "pool",
    "reduce",
    "elementwise",
    "movement",
    "other",
)
_PERF_KEYS = ("clock_hz", "ram_bytes", "dispatch_overhead_s", "peak_macs_per_s", "pj_per_mac", "memory")
_OPTIONAL_KEYS = ("efficiency", "flash_bytes", "vela", "npu", "int8c", "floatc")
# [perf.vela]: the Vela configuration that models this target (``analyze --compare vela``)
_VELA_KEYS = ("accelerator", "config", "system_config", "memory_mode")
_LEVEL_KEYS = (
    "name",
    "size_bytes",
    "read_bytes_per_s",
    "write_bytes_per_s",
    "pj_per_byte",
    "holds",
)


@dataclass(frozen=True)
class MemoryLevel:
    name: str
    size_bytes: int
    read_bytes_per_s: float
    write_bytes_per_s: float  # 0.0: read-only at inference time (flash)
    pj_per_byte: float
    holds: tuple[str, ...]  # "activations", "weights"


@dataclass(frozen=True)
class Perf:
    clock_hz: float
    ram_bytes: int  # the activation arena must fit here
    dispatch_overhead_s: float
    peak_macs_per_s: dict[str, float]  # precision -> MAC/s (FLOP/s = 2x)
    pj_per_mac: dict[str, float]
    memory: tuple[MemoryLevel, ...]  # innermost first
    # kernel class -> attainable fraction of peak in (0, 1]; a class not listed runs at 1.0
    efficiency: dict[str, float] = field(default_factory=dict)
    # where the weights are stored (an MCU's flash); None: the target file does not say
    flash_bytes: int | None = None
    # [perf.vela]: accelerator, config, system_config, memory_mode; empty: no Vela model of it
    vela: dict[str, str] = field(default_factory=dict)
    # [perf.npu]: the block-granular NPU cycle model (opfuse.cost.npu); None: plain roofline
    npu: NpuModel | None = None
    # [perf.int8c]: opfuse's generated int8 C on this target (opfuse.targets.int8c); None: absent
    int8c: Int8C | None = None
    # [perf.floatc]: opfuse's generated float C on this target (opfuse.cost.floatc); None: absent
    floatc: Int8C | None = None

    def efficiency_of(self, kernel_class: str) -> float:
        return self.efficiency.get(kernel_class, 1.0)

    def weight_level(self, weight_bytes: int = 0, arena_bytes: int = 0) -> MemoryLevel:
        """The innermost weight level that holds all ``weight_bytes`` (and the arena, if it holds
        activations too), else the outermost one."""
        levels = [m for m in self.memory if "weights" in m.holds]
        for level in levels:
            shared = arena_bytes if "activations" in level.holds else 0
            if weight_bytes + shared <= level.size_bytes:
                return level
        return levels[-1]

    def activation_level(self, arena_bytes: int) -> MemoryLevel:
        """The innermost activation level the arena fits in, else the outermost one."""
        levels = [m for m in self.memory if "activations" in m.holds]
        for level in levels:
            if arena_bytes <= level.size_bytes:
                return level
        return levels[-1]


def _number(value: object, where: str, path: Path, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise OpfuseError(f"{path}: '{where}' must be a finite number; got {value!r}")
    if value < 0 or (positive and value == 0):
        raise OpfuseError(f"{path}: '{where}' must be {'> 0' if positive else '>= 0'}; got {value!r}")
    return float(value)


def _rates(table: object, where: str, path: Path, precisions: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: '{where}' must be a table of precision = number")
    missing = [p for p in precisions if p not in table]
    if missing:
        raise OpfuseError(f"{path}: '{where}' has no entry for {', '.join(missing)}")
    extra = [p for p in table if p not in precisions]
    if extra:
        raise OpfuseError(
            f"{path}: '{where}.{extra[0]}' is not one of the target's precisions "
            f"({', '.join(precisions)})"
        )
    return {p: _number(table[p], f"{where}.{p}", path) for p in precisions}


def _level(table: object, i: int, path: Path) -> MemoryLevel:
    where = f"perf.memory[{i}]"
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: '{where}' must be a table")
    for key in table:
        if key not in _LEVEL_KEYS:
            raise OpfuseError(
                f"{path}: unknown key '{where}.{key}' (known: {', '.join(_LEVEL_KEYS)})"
            )
    for key in _LEVEL_KEYS:
        if key not in table:
            raise OpfuseError(f"{path}: missing key '{where}.{key}'")
    holds = table["holds"]
    if not isinstance(holds, list) or not holds or any(h not in HOLDS for h in holds):
        raise OpfuseError(f"{path}: '{where}.holds' must be a non-empty list of {', '.join(HOLDS)}")
    if not isinstance(table["name"], str) or not table["name"]:
        raise OpfuseError(f"{path}: '{where}.name' must be a non-empty string")
    write = _number(table["write_bytes_per_s"], f"{where}.write_bytes_per_s", path, positive=False)
    if write == 0 and "activations" in holds:
        raise OpfuseError(f"{path}: '{where}' holds activations, so it needs a write bandwidth")
    return MemoryLevel(
        name=table["name"],
        size_bytes=int(_number(table["size_bytes"], f"{where}.size_bytes", path)),
        read_bytes_per_s=_number(table["read_bytes_per_s"], f"{where}.read_bytes_per_s", path),
        write_bytes_per_s=write,
        pj_per_byte=_number(table["pj_per_byte"], f"{where}.pj_per_byte", path, positive=False),
        holds=tuple(holds),
    )


def parse_perf(table: object, path: Path, precisions: tuple[str, ...]) -> Perf | None:
    """The typed ``[perf]`` table, or None when the file has none (the target only partitions)."""
    if table is None or table == {}:
        return None
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: 'perf' must be a table")
    known = _PERF_KEYS + _OPTIONAL_KEYS
    for key in table:
        if key not in known:
            raise OpfuseError(f"{path}: unknown key 'perf.{key}' (known: {', '.join(known)})")
    for key in _PERF_KEYS:
        if key not in table:
            raise OpfuseError(f"{path}: missing key 'perf.{key}'")
    levels = table["memory"]
    if not isinstance(levels, list) or not levels:
        raise OpfuseError(f"{path}: 'perf.memory' must be one or more [[perf.memory]] tables")
    memory = tuple(_level(t, i, path) for i, t in enumerate(levels))
    for need in HOLDS:
        if not any(need in m.holds for m in memory):
            raise OpfuseError(f"{path}: no 'perf.memory' level holds {need}")
    return Perf(
        clock_hz=_number(table["clock_hz"], "perf.clock_hz", path),
        ram_bytes=int(_number(table["ram_bytes"], "perf.ram_bytes", path)),
        dispatch_overhead_s=_number(
            table["dispatch_overhead_s"], "perf.dispatch_overhead_s", path, positive=False
        ),
        peak_macs_per_s=_rates(table["peak_macs_per_s"], "perf.peak_macs_per_s", path, precisions),
        pj_per_mac=_rates(table["pj_per_mac"], "perf.pj_per_mac", path, precisions),
        memory=memory,
        efficiency=_efficiency(table.get("efficiency", {}), path),
        flash_bytes=(
            int(_number(table["flash_bytes"], "perf.flash_bytes", path))
            if "flash_bytes" in table
            else None
        ),
        vela=_vela(table.get("vela", {}), path),
        npu=parse_npu(table.get("npu"), path),
        int8c=parse_int8c(table.get("int8c"), path),
        floatc=parse_int8c(table.get("floatc"), path, FLOAT_PATHS, "floatc"),
    )


def _vela(table: object, path: Path) -> dict[str, str]:
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: 'perf.vela' must be a table")
    for key, value in table.items():
        if key not in _VELA_KEYS:
            raise OpfuseError(f"{path}: unknown key 'perf.vela.{key}' (known: {', '.join(_VELA_KEYS)})")
        if not isinstance(value, str) or not value:
            raise OpfuseError(f"{path}: 'perf.vela.{key}' must be a non-empty string")
    missing = [k for k in _VELA_KEYS if k not in table] if table else []
    if missing:
        raise OpfuseError(f"{path}: missing key 'perf.vela.{missing[0]}'")
    return dict(table)


def _efficiency(table: object, path: Path) -> dict[str, float]:
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: 'perf.efficiency' must be a table of kernel class = fraction")
    found: dict[str, float] = {}
    for key, value in table.items():
        where = f"perf.efficiency.{key}"
        if key not in KERNEL_CLASSES:
            raise OpfuseError(
                f"{path}: unknown kernel class '{where}' (known: {', '.join(KERNEL_CLASSES)})"
            )
        fraction = _number(value, where, path)
        if fraction > 1:
            raise OpfuseError(
                f"{path}: '{where}' must be in (0, 1] (a fraction of peak); got {value!r}"
            )
        found[key] = fraction
    return found
