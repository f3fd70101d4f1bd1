"""``[perf.int8c]`` of a target file: how fast opfuse's own generated int8 C runs on it, by kernel
class (written by ``opfuse calibrate`` for the ``host`` target; used by ``opfuse.cost.int8c``).

Schema (every number carries its source in a comment, as the rest of ``[perf]``)::

    [perf.int8c]
    dispatch_overhead_s = 0.0           # one C call between kernels (not a session.run)
    [perf.int8c.mac_s]                  # seconds per MAC in a whole vector, per C path
    conv_rows = 5.2e-11
    [perf.int8c.tail_s]                 # seconds per MAC of a vector loop's scalar remainder
    depthwise = 4.0e-10
    [perf.int8c.output_s]               # seconds per output element (requantize + store)
    conv_rows = 2.0e-9
    [perf.int8c.loop_s]                 # seconds per loop nest the C template starts
    pointwise = 1.1e-7

The keys are the C template paths (``PATHS``; ``opfuse.cost.cwork`` says what each loops over):
conv_lanes, pointwise, conv_rows, depthwise, gemm, gemv (a batch-1 fully connected layer where the
ISA writes the GEMV, x86/gemv.py; a table without it counts such a layer as a gemm),
depthwise_zmm (a depthwise conv in x86/depthwise*.py's vectors of 16 pixels, kernelplan/dw8.py;
a table without it counts the portable C's SIMD pairs, as the depthwise path), pool (an
int8 AveragePool: its taps, window rows and a division per output), pool_max (an int8 MaxPool: no
division; a table without it prices it as a pool), reduce, elementwise, movement, other, epilogue, quantize (a float tensor's QuantizeLinear: a
division and a rounding per element; a table without it prices it at the elementwise path's rates). Every sub-table is optional and a path may be absent: an absent ``mac_s`` falls back to the int8
peak x ``[perf.efficiency]`` of the kernel's class (measured on onnxruntime), an absent per-output,
per-loop or tail cost is 0. Seconds, not a fraction of the peak: the C's short int8 dot products
(a Gemm's, in L1) beat the 1024^3 MatMulInteger the peak is measured on.
A target without ``[perf.int8c]`` (every target before it existed, a ``host`` calibrated by an
older opfuse) costs int8 kernels as before: FLOPs at the int8 peak x ``[perf.efficiency]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from opfuse.errors import OpfuseError

_TABLES = ("mac_s", "tail_s", "output_s", "loop_s")
# the C template paths the tables are keyed by (opfuse.cost.cwork says what each one loops)
PATHS = ("conv_lanes", "pointwise", "conv_rows", "depthwise", "depthwise_zmm", "gemm", "gemv",
         "pool", "pool_max",
         "reduce", "elementwise", "movement", "other", "epilogue", "quantize")
# a path a table may lack (a host calibrated before it existed, or whose probe leaves the float
# boundary out): priced at the rates of the path it was part of
FALLBACK_PATH = {"quantize": "elementwise", "pool_max": "pool"}
# [perf.floatc] (the same schema, opfuse.cost.floatc): opfuse's float C, keyed by the paths of
# opfuse.kernelplan.convf (depthwise, pixels, direct, vector, columns, channels), a depthwise
# conv's copy of its input rows into a band (band), a pixel tile's into its line buffer (line)
# and the classes of the other kernels (pool_taps: a pool one output value wide, its taps unrolled); a cascade member's direct core is priced as the layer-by-layer register
# tile (vector) where the table lacks it
FLOAT_PATHS = ("depthwise", "band", "line", "pixels", "direct", "vector", "columns", "channels", "gemm",
               "pool", "pool_taps", "reduce", "elementwise", "movement", "other", "epilogue")
FLOAT_FALLBACK = {"direct": "vector", "columns": "vector", "channels": "pixels", "pool_taps": "pool"}


@dataclass(frozen=True)
class Int8C:
    dispatch_overhead_s: float = 0.0
    mac_s: dict[str, float] = field(default_factory=dict)
    output_s: dict[str, float] = field(default_factory=dict)
    loop_s: dict[str, float] = field(default_factory=dict)
    tail_s: dict[str, float] = field(default_factory=dict)


def parse_int8c(table: object, path: Path, classes: tuple[str, ...] = PATHS,
                name: str = "int8c") -> Int8C | None:
    """``[perf.int8c]`` (or, with ``name`` "floatc" and ``FLOAT_PATHS``, ``[perf.floatc]``)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: 'perf.{name}' must be a table")
    known = ("dispatch_overhead_s", *_TABLES)
    for key in table:
        if key not in known:
            raise OpfuseError(f"{path}: unknown key 'perf.{name}.{key}' (known: {', '.join(known)})")
    found: dict[str, dict[str, float]] = {}
    for sub_name in _TABLES:
        sub = table.get(sub_name, {})
        if not isinstance(sub, dict):
            raise OpfuseError(f"{path}: 'perf.{name}.{sub_name}' must be a table of C path = number")
        found[sub_name] = {}
        for klass, value in sub.items():
            where = f"perf.{name}.{sub_name}.{klass}"
            if klass not in classes:
                raise OpfuseError(f"{path}: unknown C path '{where}' (known: {', '.join(classes)})")
            found[sub_name][klass] = _number(value, where, path)
    dispatch = _number(table.get("dispatch_overhead_s", 0.0), f"perf.{name}.dispatch_overhead_s",
                       path)
    return Int8C(dispatch, found["mac_s"], found["output_s"], found["loop_s"],
                 found["tail_s"])


def _number(value: object, where: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise OpfuseError(f"{path}: '{where}' must be a finite number; got {value!r}")
    if value < 0:
        raise OpfuseError(f"{path}: '{where}' must be >= 0 (seconds); got {value!r}")
    return float(value)
