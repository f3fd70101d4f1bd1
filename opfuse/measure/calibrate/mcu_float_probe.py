"""``[perf.floatc]`` of the Cortex-M targets: opfuse's own generated float C, counted per kernel in
instructions under QEMU on the target's board (``opfuse.measure.run.qemu``), fitted to the work
model of ``opfuse.cost.fwork`` (the float conv plan's paths) and written as seconds at the deployed
part's clock, as ``[perf.int8c]`` is (``opfuse.measure.calibrate.mcu_probe``; docs/architecture.md,
the cost row):

    seconds = instructions x CYCLES_PER_INSTRUCTION[target] / clock_hz

The probe: the int8 probe's layers in float (``int8_probe.CASES`` and ``mcu_probe.MCU_CASES``) and
``FLOAT_CASES``, one branch each, run layer by layer (every layer-by-layer path of ``plan_convf``
on a scalar FPU, Gemms, pools, global pools, Adds, Softmaxes, Transposes, LayerNormalizations,
a classifier's average pools over small planes, ConvTransposes: the ``columns`` path),
and ``CHAINS``, small CNN stems the partition streams as one cascade each (run cascaded: the members' plans, ``direct`` among them). Every
kernel is one row of a single fit (a kernel of several loops, a fused Relu's or a cascade's
members, is the sum of their work), non-negative, minimising the relative error: per path,
instructions per MAC, per output and per loop started. A cost the fit drives negative is dropped
(0) and the rest refitted. A view's median is the dispatch overhead.

``python benchmarks/mcu_calibrate.py --float`` re-measures and rewrites the tables; re-run it when
the float C's loop nests change.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import numpy as np

from opfuse.measure.calibrate.mcu_probe import CYCLES_PER_INSTRUCTION, figure_rows
from opfuse.measure.calibrate.mcu_probe import write_table as write_block

# (name, input shape, layers: (input channels, output channels, kernel, stride, groups)), each
# conv followed by a Relu: MobileNet- and ResNet-like stems whose convs stream as one cascade
CHAINS = (
    ("mbv1", (1, 3, 64, 64), ((3, 16, 3, 2, 1), (16, 16, 3, 1, 16), (16, 32, 1, 1, 1),
                              (32, 32, 3, 2, 32), (32, 32, 1, 1, 1))),
    ("res", (1, 3, 48, 48), ((3, 16, 3, 1, 1), (16, 16, 3, 1, 1), (16, 32, 3, 2, 1),
                             (32, 32, 3, 1, 1))),
    ("mbv2", (1, 8, 40, 40), ((8, 48, 1, 1, 1), (48, 48, 3, 1, 48), (48, 16, 1, 1, 1),
                              (16, 64, 1, 1, 1), (64, 64, 3, 2, 64), (64, 24, 1, 1, 1))),
    ("wide", (1, 16, 24, 24), ((16, 24, 3, 1, 1), (24, 24, 3, 1, 24), (24, 48, 1, 1, 1),
                               (48, 48, 5, 1, 48), (48, 40, 1, 1, 1))),
)

# float layers beyond the int8 probe's: a transformer's LayerNormalization over its last axis, a
# classifier's average pool over a small plane of many channels (vww_96_float's 3x3 x 256)
FLOAT_CASES = (
    ("AveragePool", {"kernel_shape": [3, 3]}, (1, 256, 3, 3), None, ""),
    ("AveragePool", {"kernel_shape": [2, 2]}, (1, 192, 2, 2), None, ""),
    ("LayerNormalization", {"axis": -1}, (1, 64, 64), (64,), ""),
    ("LayerNormalization", {"axis": -1}, (1, 32, 128), (128,), ""),
    ("LayerNormalization", {"axis": -1}, (1, 100, 16), (16,), ""),
    # ConvTranspose (backends/c/convt.py): column tiles over sub-pixel phases (``columns``), its
    # line buffer (``line``); as many output as input channels (the probe's bias is wshape[0])
    ("ConvTranspose", {"strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 16, 10, 10), (16, 16, 4, 4),
     "relu"),
    ("ConvTranspose", {"strides": [2, 2]}, (1, 24, 8, 12), (24, 24, 2, 2), ""),
)

BEGIN = ("# >>> [perf.floatc] written by benchmarks/mcu_calibrate.py --float "
         "(opfuse.measure.calibrate.mcu_float_probe)")
END = "# <<< [perf.floatc]"
COLUMNS = ("lane_macs", "outputs", "loops")


def chain_model(name: str, shape: tuple[int, ...], layers: tuple) -> object:
    """A float ONNX model of ``layers`` one after the other (``CHAINS``)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i, (ci, co, k, s, g) in enumerate(layers):
        w = (rng.standard_normal((co, ci // g, k, k)) * 0.1).astype(np.float32)
        b = (rng.standard_normal(co) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"n{i}",
                                      kernel_shape=[k, k], pads=[k // 2] * 4, strides=[s, s],
                                      group=g))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"r{i}"))
        x = f"r{i}"
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto


def kernel_rows(result, cascades: bool, timeout_s: float) -> list[tuple[str, list, float]]:  # noqa: ANN001
    """(kind, its fwork.Work items, instructions) of every kernel of ``result``'s float C run
    under QEMU (``cascades``: as emit_c streams them, a cascade's members' work summed)."""
    from opfuse.backends.c.emit import c_schedule
    from opfuse.cost.cwork import is_view
    from opfuse.cost.fwork import float_kernel_work
    from opfuse.measure.run.qemu import emulate_c

    scalar, rows = result.target.isa.scalar, result.target.isa.depthwise_rows
    emu = emulate_c(result, trials=1, timeout_s=timeout_s, cascades=cascades)
    sched = c_schedule(result, cascades=cascades)
    nodes = {n.name: n for n in sched.model.graph}
    found = []
    for kernel, count in zip(sched.partition.kernels, emu.kernels, strict=True):
        members = [nodes[n] for n in kernel.nodes if n in nodes]
        if kernel.is_cascade:
            works = [w for m in kernel.members
                     for w in float_kernel_work([nodes[n] for n in m.nodes if n in nodes],
                                                scalar, member=True, rows=rows)]
        else:
            works = float_kernel_work(members, scalar, rows=rows)
        found.append(("view" if is_view(members) else "layer", works, float(count.instructions)))
    return found


def measure_kernels(target: str, timeout_s: float = 600.0) -> list[tuple[str, list, float]]:
    """Every probe kernel's work and instructions on ``target``'s board (module docstring)."""
    import onnx

    from opfuse.measure.calibrate.int8_probe import CASES, chunks, probe_model
    from opfuse.measure.calibrate.mcu_probe import MCU_CASES
    from opfuse.pipeline import compile_model

    found = []
    with tempfile.TemporaryDirectory(prefix="opfuse-mcufloat-") as tmp:
        for i, cases in enumerate(chunks(CASES + MCU_CASES + FLOAT_CASES)):
            path = Path(tmp) / f"probe{i}.onnx"
            onnx.save(probe_model(cases), path)
            found += kernel_rows(compile_model(str(path), target), False, timeout_s)
        for name, shape, layers in CHAINS:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(chain_model(name, shape, layers), path)
            found += kernel_rows(compile_model(str(path), target), True, timeout_s)
    return found


def fit(found: list[tuple[str, list, float]]) -> dict:
    """The figures in instructions: {"dispatch_overhead_s", "mac_s", "output_s", "loop_s",
    "kernels"} (module docstring; "seconds" keys hold instructions until ``table_lines``)."""
    views = [t for k, _, t in found if k == "view"]
    layers = [(w, t) for k, w, t in found if k == "layer" and w and t > 0]
    keys = sorted({(w.path, c) for works, _ in layers for w in works for c in COLUMNS
                   if getattr(w, c)})
    index = {k: j for j, k in enumerate(keys)}
    a = np.zeros((len(layers), len(keys)))
    y = np.array([t for _, t in layers], float)
    for i, (works, _) in enumerate(layers):
        for w in works:
            for c in COLUMNS:
                if getattr(w, c):
                    a[i, index[(w.path, c)]] += float(getattr(w, c))
    scale = np.where(a.max(axis=0) > 0, a.max(axis=0), 1.0) if len(layers) else np.ones(len(keys))
    weighted = a / scale / y[:, None]
    active = list(range(len(keys)))
    coef = np.zeros(len(keys))
    while active:
        sol = np.linalg.lstsq(weighted[:, active], np.ones(len(y)), rcond=None)[0]
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    coef = coef / scale
    tables: dict[str, dict[str, float]] = {"mac_s": {}, "output_s": {}, "loop_s": {}}
    names = {"lane_macs": "mac_s", "outputs": "output_s", "loops": "loop_s"}
    for (path, column), value in zip(keys, coef, strict=True):
        tables[names[column]][path] = float(value)
    return {"dispatch_overhead_s": statistics.median(views) if views else 0.0, **tables,
            "kernels": len(found)}


def table_lines(target: str, figures: dict, clock_hz: float) -> list[str]:
    """``[perf.floatc]`` in seconds at ``clock_hz`` (the target file's ``[perf].clock_hz``)."""
    cpi = CYCLES_PER_INSTRUCTION[target]
    per_s = cpi / clock_hz
    lines = [BEGIN,
             f"# {figures.get('kernels', 0)} float probe kernels (int8_probe.CASES, "
             f"mcu_probe.MCU_CASES, mcu_float_probe.FLOAT_CASES, CHAINS cascaded)",
             "# counted on [board] under QEMU -icount,",
             "# fitted per path of opfuse.kernelplan.convf (opfuse.cost.fwork) in instructions; "
             f"seconds = instructions x {cpi} cycles",
             "# per instruction (opfuse.measure.calibrate.mcu_probe: CYCLES_PER_INSTRUCTION, "
             "sourced there) / clock_hz",
             "[perf.floatc]",
             f"dispatch_overhead_s = {figures.get('dispatch_overhead_s', 0.0) * per_s:.4g}"
             f"  # {figures.get('dispatch_overhead_s', 0.0):.1f} instructions"]
    units = {"mac_s": "per MAC", "output_s": "per output", "loop_s": "per loop"}
    return lines + figure_rows("floatc", figures, units, per_s) + [END]


def write_table(path: Path, lines: list[str]) -> None:
    """Replace the marked ``[perf.floatc]`` block of a target file (mcu_probe.write_table)."""
    write_block(path, lines, BEGIN, END)
