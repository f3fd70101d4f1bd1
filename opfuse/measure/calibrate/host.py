"""``calibrate``: measure this machine and write a target named ``host`` (``opfuse calibrate``).

Measured in about 25 s (the rates the best of a few repeats, the efficiencies medians):

- streaming bandwidth of each cache level found in sysfs (L1d, L2, L3) and of DRAM: a copy
  between two page-aligned buffers skewed so they never alias modulo 4 KiB, at several working
  sets within each level, the median kept (``opfuse.measure.calibrate.bandwidth``); a copy reads and writes every
  byte, so the rate is 2 x size / time, used for both read and write bandwidth. The hierarchy is
  checked (L2 >= L3 >= DRAM, the levels the target keeps) and a failure is reported in
  ``warnings``, never silently. L1 is measured too but only reported, as a lower bound: numpy's
  per-call cost (~0.2 us) is as long as an L1-sized copy, so its figure is too noisy to check;
- the fp32 GEMM rate of one thread: onnxruntime MatMul 1024x1024x1024, ``intra_op_num_threads=1``;
  the int8 rate likewise with MatMulInteger (uint8), which MLAS runs with its integer kernels;
- per-call overhead: the median of many ``session.run`` calls on a one-element Relu;
- per-class compute efficiency (``[perf.efficiency]``): one-node models of each kernel class at
  typical mobile-CNN sizes, as a fraction of the fp32 GEMM peak (``opfuse.measure.calibrate.efficiency``). They
  are measured in fp32 and written once, for every precision;
- opfuse's own int8 C (``[perf.int8c]``, about 15 s more): probe layers of every C template path
  (``opfuse.measure.calibrate.int8_probe``), quantized by onnxruntime, emitted as C, each kernel timed in the
  full invoke (``opfuse.measure.run.kernel_times``) and fitted per path: seconds per MAC in whole vectors,
  per scalar-tail MAC, per output and per vector loop, and a C call's dispatch. A quantized model is costed on ``host`` as that C, since it is what runs it there
  (``opfuse.cost.int8c``). ``calibrate(int8c=False)`` skips it (a file without the table costs
  int8 kernels at the onnxruntime figures, as before).

Cache levels are written with ``holds = ["activations", "weights"]``: across repeated inference the
weights stay in the last-level cache when they fit it with the arena (``opfuse.cost.roofline``).

Energy (pJ per byte and per MAC) cannot be measured this way; it is copied from ``x86-host``
(Horowitz, ISSCC 2014), and so are the fusion capabilities and the ``[isa]`` record (the probe's
C is x86-host's, so the host's C must be the same for ``[perf.int8c]`` to price it). The file goes to the user's target
folder (``opfuse.targets.user_targets_dir()``, by default ``~/.config/opfuse/targets/host.toml``),
where ``load_target("host")`` finds it.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from datetime import date
from pathlib import Path

import numpy as np

from opfuse.errors import OpfuseError
from opfuse.measure.calibrate.bandwidth import level_rate, monotone_warnings
from opfuse.measure.calibrate.efficiency import measure_efficiency
from opfuse.output import write_file
from opfuse.targets import load_target, user_targets_dir

_DRAM_ARRAY = 64 * 1024 * 1024


def _cache_sizes() -> dict[str, int]:
    """{"l1": bytes, "l2": bytes, "l3": bytes} (data/unified caches) from sysfs (Linux); empty
    where unknown."""
    found: dict[str, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")) if base.is_dir() else []:
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        if kind == "Instruction" or level not in ("1", "2", "3"):
            continue
        scale = {"K": 1024, "M": 1024 * 1024}.get(size[-1], 1)
        found[f"l{level}"] = int(size.rstrip("KMB")) * scale
    return found


def _session(op: str, shapes: dict[str, tuple[int, ...]], dtype: int):  # noqa: ANN202
    import onnx
    from onnx import helper

    from opfuse.measure.sessions import ENABLE_ALL, one_thread_session

    inputs = [helper.make_tensor_value_info(n, dtype, s) for n, s in shapes.items()]
    out_type = onnx.TensorProto.INT32 if op == "MatMulInteger" else dtype
    out = helper.make_tensor_value_info("y", out_type, None)
    graph = helper.make_graph([helper.make_node(op, list(shapes), ["y"])], "g", inputs, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return one_thread_session(model, ENABLE_ALL)


def _gemm_macs_per_s(int8: bool, n: int = 1024, budget_s: float = 2.0) -> float:
    import onnx

    rng = np.random.default_rng(0)
    if int8:
        sess = _session("MatMulInteger", {"a": (n, n), "b": (n, n)}, onnx.TensorProto.UINT8)
        feeds = {k: rng.integers(0, 255, (n, n), dtype=np.uint8) for k in ("a", "b")}
    else:
        sess = _session("MatMul", {"a": (n, n), "b": (n, n)}, onnx.TensorProto.FLOAT)
        feeds = {k: rng.standard_normal((n, n)).astype(np.float32) for k in ("a", "b")}
    sess.run(None, feeds)
    best = float("inf")
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        sess.run(None, feeds)
        best = min(best, time.perf_counter() - t0)
    return n**3 / best


def _call_overhead_s(calls: int = 3000) -> float:
    import onnx

    sess = _session("Relu", {"x": (1,)}, onnx.TensorProto.FLOAT)
    feeds = {"x": np.ones(1, dtype=np.float32)}
    for _ in range(200):
        sess.run(None, feeds)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _clock_hz() -> float:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) * 1e6
    except (OSError, ValueError):
        pass
    return 1e9


def cpu_name() -> str:
    """The CPU's model name, as benchmarks print it beside their figures."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def calibrate(int8c: bool = True) -> dict:
    """Measure this machine (one thread); a dict of the figures ``write_host_target`` writes;
    ``int8c``: also time opfuse's own int8 C (``opfuse.measure.calibrate.int8_probe``, about 15 s)."""
    levels, below = [], 0
    for name, size in sorted(_cache_sizes().items()):
        levels.append({"name": name, "size_bytes": size, **level_rate(size, below, 0.25)})
        below = size
    dram = level_rate(max(8 * below, 4 * _DRAM_ARRAY), max(below, _DRAM_ARRAY // 2), 0.4)
    levels.append({"name": "dram", "size_bytes": _ram_bytes(), **dram})
    warnings = monotone_warnings([lv for lv in levels if lv["name"] != "l1"])
    peak = {"fp32": _gemm_macs_per_s(int8=False), "int8": _gemm_macs_per_s(int8=True)}
    overhead = _call_overhead_s()
    figures = {
        "cpu": cpu_name(),
        "clock_hz": _clock_hz(),
        "ram_bytes": _ram_bytes(),
        "peak_macs_per_s": peak,
        "dispatch_overhead_s": overhead,
        "memory": [lv for lv in levels if lv["name"] != "l1"],  # L1: reported only
        "l1_bytes_per_s": next((lv["bytes_per_s"] for lv in levels if lv["name"] == "l1"), None),
        "warnings": warnings,
        "efficiency": measure_efficiency(peak["fp32"], overhead),
    }
    if int8c:
        from opfuse.measure.calibrate.int8_probe import calibrate_int8c

        try:
            figures["int8c"] = calibrate_int8c()
        except OpfuseError as err:  # no C compiler: the file is written without [perf.int8c]
            warnings.append(f"calibrate: opfuse's int8 C not measured ({err}); int8 kernels are "
                            "costed at the onnxruntime figures")
    return figures


def _ram_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def _toml_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def host_target_text(figures: dict) -> str:
    """The ``host`` target file for ``figures`` (as ``calibrate()`` returns them)."""
    ref = load_target("x86-host")
    assert ref.perf is not None
    when = date.today().isoformat()
    src = f"measured by opfuse calibrate on {when} ({figures['cpu']}, one thread)"
    caps = ref.fusion
    lines = [
        'name = "host"',
        f'description = "This machine, measured by opfuse calibrate: {figures["cpu"]}"',
        f'source = """{src}; energy, fusion capabilities and isa copied from x86-host."""',
        'precisions = ["fp32", "int8"]',
        "",
        "[fusion]  # copied from x86-host (ONNX Runtime CPU execution provider)",
    ]
    for field in ("anchor_epilogue", "elementwise_epilogue", "pool_epilogue"):
        lines.append(f"{field} = {_toml_list(getattr(caps, field))}")
    for field in ("residual_add", "anchor_pool", "elementwise_chains", "recompute",
                  "int8_requantize_once", "cascade", "cascade_residual", "attention",
                  "anchor_bias", "anchor_norm"):
        lines.append(f"{field} = {str(getattr(caps, field)).lower()}")
    for field in ("max_chain", "cascade_max_anchors", "cascade_band_rows", "cascade_min_width"):
        lines.append(f"{field} = {getattr(caps, field)}")
    lines += ["", "[perf]"]
    peak = figures["peak_macs_per_s"]
    lines += [
        f"clock_hz = {figures['clock_hz']:.6g}  # /proc/cpuinfo 'cpu MHz'",
        f"ram_bytes = {int(figures['ram_bytes'])}  # physical memory (sysconf)",
        f"dispatch_overhead_s = {figures['dispatch_overhead_s']:.6g}  # {src}: median "
        "onnxruntime session.run on a one-element Relu",
        f"peak_macs_per_s = {{ fp32 = {peak['fp32']:.6g}, int8 = {peak['int8']:.6g} }}  # {src}: "
        "onnxruntime MatMul / MatMulInteger 1024^3",
        "pj_per_mac = { "
        + ", ".join(f"{p} = {ref.perf.pj_per_mac[p]:g}" for p in ("fp32", "int8"))
        + " }  # copied from x86-host (Horowitz ISSCC 2014)",
    ]
    efficiency = figures.get("efficiency") or {}
    if efficiency:
        lines += [
            "",
            f"[perf.efficiency]  # {src}: onnxruntime one-node models per class (fp32, typical "
            "mobile-CNN sizes), FLOPs / (median time - overhead) / fp32 GEMM peak; median of shapes",
        ]
        lines += [f"{k} = {v:.4g}  # {src}" for k, v in efficiency.items()]
    lines += _int8c_lines(figures.get("int8c"), src)
    ref_pj = {m.name: m.pj_per_byte for m in ref.perf.memory}
    for level in figures["memory"]:
        holds = ("activations", "weights")  # caches keep what is reused; DRAM holds everything
        rate = level["bytes_per_s"]
        lines += [
            "",
            "[[perf.memory]]",
            f'name = "{level["name"]}"',
            f"size_bytes = {int(level['size_bytes'])}  # sysfs cache size / physical memory",
            f"read_bytes_per_s = {rate:.6g}  # {src}: unaliased copy, 2 x bytes / time, median of "
            "working sets within the level",
            f"write_bytes_per_s = {rate:.6g}  # same measurement",
            f"pj_per_byte = {ref_pj.get(level['name'], 12.5):g}  # copied from x86-host (Horowitz)",
            f"holds = {_toml_list(holds)}",
        ]
    return "\n".join(lines + _isa_lines(ref.isa)) + "\n"


def _isa_lines(isa) -> list[str]:  # noqa: ANN001 (opfuse.targets.isa.Isa)
    """``[isa]`` copied from x86-host: the int8 probe's C (``[perf.int8c]``) is x86-host's, so
    the host's must be too (a host without it got the portable C, ~10x slower than its rates)."""
    tile = ", ".join(str(v) for v in isa.matmul_tile)
    return ["", "[isa]  # copied from x86-host: the C kernels the int8 probe timed",
            f'name = "{isa.name}"', f"vector_bits = {isa.vector_bits}",
            f"vector_registers = {isa.vector_registers}", f'int8_dot = "{isa.int8_dot}"',
            f"matmul_tile = [{tile}]", f"softmax_lanes = {isa.softmax_lanes}",
            f"depthwise_rows = {str(isa.depthwise_rows).lower()}"]


def _int8c_lines(int8c: dict | None, src: str) -> list[str]:
    """``[perf.int8c]`` (``opfuse.targets.int8c``): absent when not measured."""
    if not int8c:
        return []
    probe = (f"{src}: opfuse's own int8 C of {int8c.get('kernels', 0)} probe kernels "
             "(opfuse.measure.calibrate.int8_probe), each timed in the full invoke, fitted per class")
    lines = [
        "",
        f"[perf.int8c]  # {probe}",
        f"dispatch_overhead_s = {int8c['dispatch_overhead_s']:.4g}  # median time of a view "
        "kernel: one C call, the timer's own cost subtracted",
    ]
    for table, what in (("mac_s", "seconds per MAC in whole vectors"),
                        ("tail_s", "seconds per MAC of a vector loop's scalar remainder"),
                        ("output_s", "seconds per output element (requantize + store)"),
                        ("loop_s", "seconds per vector loop the template starts")):
        values = int8c.get(table) or {}
        if values:
            lines += ["", f"[perf.int8c.{table}]  # {what}; {probe}"]
            lines += [f"{k} = {v:.4g}" for k, v in values.items()]
    return lines


def write_host_target(path: str | Path | None = None, figures: dict | None = None) -> Path:
    """Measure (unless ``figures`` are given) and write the ``host`` target; return its path."""
    target = Path(path) if path is not None else user_targets_dir() / "host.toml"
    target.parent.mkdir(parents=True, exist_ok=True)
    text = host_target_text(figures if figures is not None else calibrate())
    write_file(target, text)
    return target
