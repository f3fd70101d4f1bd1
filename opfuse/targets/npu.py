"""The ``[perf.npu]`` table: a block-granular NPU's cycle model, parsed (used by ``opfuse.cost.npu``).

Schema (every number cites its source in the target file)::

    [perf.npu]
    ofm_ublock = [2, 1, 8]             # output micro-block: height, width, channels
    ifm_depth_step = 32                # dense traversal: input channels per kernel step
    partkernel_depth_step = 8          # part-kernel traversal: input channels per step ...
    kernel_elements_per_step = 4       # ... and kernel elements per step (also depthwise)
    cycles_per_step = 4                # cycles per micro-block per step
    weight_cycles_per_ublock = 32      # floor per micro-block column: weights stream in
    output_cycles_per_element = { default = 0.5, Add = 1.5 }   # output stage, per op type
    lowered_ops = { Softmax = 27 }     # ops the compiler lowers into several NPU operations
    weight_compression = "entropy"     # "none" or "entropy": weights are stored encoded
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from opfuse.errors import OpfuseError

_INTS = ("ifm_depth_step", "partkernel_depth_step", "kernel_elements_per_step", "cycles_per_step",
         "weight_cycles_per_ublock")
_KEYS = ("ofm_ublock", *_INTS, "output_cycles_per_element", "lowered_ops", "weight_compression")
COMPRESSIONS = ("none", "entropy")


@dataclass(frozen=True)
class NpuModel:
    ofm_ublock: tuple[int, int, int]
    ifm_depth_step: int
    partkernel_depth_step: int
    kernel_elements_per_step: int
    cycles_per_step: int
    weight_cycles_per_ublock: int
    output_cycles_per_element: dict[str, float] = field(default_factory=dict)
    lowered_ops: dict[str, int] = field(default_factory=dict)
    weight_compression: str = "none"

    def output_cycles(self, op_type: str) -> float:
        table = self.output_cycles_per_element
        return table.get(op_type, table.get("default", 0.0))


def _positive_int(value: object, where: str, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise OpfuseError(f"{path}: '{where}' must be a positive integer; got {value!r}")
    return value


def parse_npu(table: object, path: Path) -> NpuModel | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: 'perf.npu' must be a table")
    for key in table:
        if key not in _KEYS:
            raise OpfuseError(f"{path}: unknown key 'perf.npu.{key}' (known: {', '.join(_KEYS)})")
    for key in ("ofm_ublock", *_INTS):
        if key not in table:
            raise OpfuseError(f"{path}: missing key 'perf.npu.{key}'")
    ublock = table["ofm_ublock"]
    if not isinstance(ublock, list) or len(ublock) != 3:
        raise OpfuseError(f"{path}: 'perf.npu.ofm_ublock' must be [height, width, channels]")
    out = table.get("output_cycles_per_element", {})
    lowered = table.get("lowered_ops", {})
    if not isinstance(out, dict) or not isinstance(lowered, dict):
        raise OpfuseError(f"{path}: 'perf.npu.output_cycles_per_element' and 'lowered_ops' "
                          "must be tables of op type = number")
    for key, value in out.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise OpfuseError(f"{path}: 'perf.npu.output_cycles_per_element.{key}' must be >= 0")
    compression = table.get("weight_compression", "none")
    if compression not in COMPRESSIONS:
        raise OpfuseError(f"{path}: 'perf.npu.weight_compression' must be one of "
                          f"{', '.join(COMPRESSIONS)}; got {compression!r}")
    return NpuModel(
        ofm_ublock=tuple(_positive_int(v, "perf.npu.ofm_ublock", path) for v in ublock),  # type: ignore[arg-type]
        **{k: _positive_int(table[k], f"perf.npu.{k}", path) for k in _INTS},
        output_cycles_per_element={k: float(v) for k, v in out.items()},
        lowered_ops={k: _positive_int(v, f"perf.npu.lowered_ops.{k}", path)
                     for k, v in lowered.items()},
        weight_compression=compression,
    )
