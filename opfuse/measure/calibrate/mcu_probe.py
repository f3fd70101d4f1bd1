"""``[perf.int8c]`` of the Cortex-M targets: opfuse's own generated int8 C, counted per kernel in
instructions under QEMU on the target's board (``opfuse.measure.run.qemu``), fitted to the work
model of ``opfuse.cost.cwork`` as the host's probe is (``opfuse.measure.calibrate.int8_probe``: the same probe
layers, the same fit), and written as seconds at the deployed part's clock
(docs/architecture.md, the cost row):

    seconds = instructions x CYCLES_PER_INSTRUCTION[target] / clock_hz

QEMU counts instructions, not cycles, so the cycles a prediction reports rest on an assumed
cycles per instruction (``CYCLES_PER_INSTRUCTION``, sourced there). ``benchmarks/mcu.py`` compares
the instructions the table predicts with the instructions measured on the shared int8 models.
``python benchmarks/mcu_calibrate.py`` re-measures and rewrites the table in the target files.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from opfuse.ops import groups

# Cycles per instruction assumed for opfuse's int8 inner loops (loads, SXTB16/SMLAD, MLA, SMULL,
# compares, branches):
# - cortex-m4: Arm Cortex-M4 Technical Reference Manual (ARM 100166, Table 3-1 "Processor
#   instruction set summary"): data processing, MUL/MLA, SMULL/SMLAL, SXTB16 and SMLAD take 1
#   cycle, LDR 2 (1 when it pipelines with a neighbouring load or store), a taken branch 1 + P
#   (P = 1..3, the pipeline refill). With about one load in five instructions and one taken
#   branch in ten: 1 + 0.2 x 0.5 + 0.1 x 1 = 1.2 (an estimate from those timings).
# - cortex-m7: Arm publishes no per-instruction cycle table for the Cortex-M7 (its TRM, ARM DDI
#   0489, describes a dual-issue six-stage pipeline with one MAC pipeline and branch prediction).
#   Assumed 1.0: dual issue of a load or ALU op beside the MACs offsets the taken branches and
#   load-use stalls (an estimate, not a measurement).
# - cortex-m33: its TRM (Arm 100230) gives no per-instruction table either; a three-stage
#   pipeline like the M4's, with the same single-cycle SMLAD and MLA: assumed 1.2 as on the M4
#   (an estimate, not a measurement).
# - cortex-m55: its TRM (Arm 101051) describes a four-stage pipeline whose MVE is dual-beat: a
#   128-bit vector instruction occupies two cycles, overlapped with the next when they use
#   different units. Scalar code as on the M33 (1.2); the MVE cores are about one vector
#   instruction in two: assumed 1.5 (an estimate, not a measurement).
CYCLES_PER_INSTRUCTION = {"cortex-m4": 1.2, "cortex-m7": 1.0, "cortex-m33": 1.2,
                          "cortex-m55": 1.5}

# Layers an MCU model has beyond the host's probe (opfuse.measure.calibrate.int8_probe.CASES): the layout
# Transposes at a TFLite model's boundary, a classifier's 1x1 convs on a 1x1 plane, short Gemms,
# a whole-plane average pool, a big-window max pool, a classifier's Softmax (its output requantized to TFLite's
# 1/256 and -128 after onnxruntime's quantization: ``as_tflite``), ReduceMeans over few values.
MCU_CASES = (
    ("Transpose", {"perm": [0, 2, 3, 1]}, (1, 3, 32, 32), None, ""),
    ("Transpose", {"perm": [0, 3, 1, 2]}, (1, 12, 12, 16), None, ""),
    ("Transpose", {"perm": [0, 2, 3, 1]}, (1, 1, 48, 48), None, ""),
    ("Conv", {}, (1, 256, 1, 1), (2, 256, 1, 1), ""),
    ("Conv", {}, (1, 64, 1, 1), (12, 64, 1, 1), ""),
    ("Conv", {}, (1, 160, 1, 1), (10, 160, 1, 1), ""),
    ("AveragePool", {"kernel_shape": [25, 5]}, (1, 64, 25, 5), None, ""),
    ("AveragePool", {"kernel_shape": [8, 8]}, (1, 32, 8, 8), None, ""),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2]}, (1, 16, 21, 21), None, ""),
    ("Softmax", {"axis": -1}, (1, 12), None, ""),
    ("Softmax", {"axis": -1}, (1, 2), None, ""),
    ("Softmax", {"axis": -1}, (1, 100), None, ""),
    # an autoencoder's bottleneck (ad01_int8): Gemms over a short K and onto few rows, which the
    # MCU's 4-row core runs at its full rate (no vector tail as the host's template has)
    ("Gemm", {"transB": 1}, (1, 8), (128, 8), "relu"),
    ("Gemm", {"transB": 1}, (1, 128), (8, 128), "relu"),
    # mcunet's squeeze: a mean over the last axis of a 3x3 plane, then over the next
    ("ReduceMean", {"axes": [3], "keepdims": 0}, (1, 160, 3, 3), None, ""),
    ("ReduceMean", {"axes": [2], "keepdims": 0}, (1, 96, 5, 4), None, ""),
    ("ReduceMean", {"axes": [2, 3], "keepdims": 1}, (1, 64, 4, 4), None, ""),
)

BEGIN = "# >>> [perf.int8c] written by benchmarks/mcu_calibrate.py (opfuse.measure.calibrate.mcu_probe)"
END = "# <<< [perf.int8c]"


def measure_kernels(target: str, timeout_s: float = 300.0) -> list[tuple[str, list, float]]:
    """(kind, cwork.Work items, instructions) of every kernel of the probe's int8 C on
    ``target``'s board, as ``int8_probe.measure_kernels`` gives seconds on the host."""
    from opfuse.backends.c.emit import c_schedule
    from opfuse.backends.c.int8.requant import ROUNDING, TFLITE
    from opfuse.cost.cwork import is_view, kernel_work
    from opfuse.measure.calibrate.int8_probe import CASES, chunks, quantized_probe
    from opfuse.measure.run.qemu import emulate_c
    from opfuse.pipeline import compile_model

    found = []
    for cases in chunks(CASES + MCU_CASES):
        with tempfile.TemporaryDirectory(prefix="opfuse-mcuprobe-") as tmp:
            probe = quantized_probe(Path(tmp), cases)
            as_tflite(probe)
            result = compile_model(probe, target)
            result.optimized.meta[ROUNDING] = TFLITE  # as the C of every .tflite model
            emu = emulate_c(result, trials=1, timeout_s=timeout_s, cascades=False)
        sched = c_schedule(result, cascades=False)  # the probe counts layer-by-layer kernels
        model, part = sched.model, sched.partition
        nodes = {n.name: n for n in model.graph}
        for kernel, count in zip(part.kernels, emu.kernels, strict=True):
            members = [nodes[n] for n in kernel.nodes if n in nodes]
            # the probe's own QuantizeLinear / DequantizeLinear count too: an MCU model's float
            # input and output run the same kernels
            kind = "view" if is_view(members) else "layer"
            found.append((kind, kernel_work(members), float(count.instructions)))
    return found


def as_tflite(path: Path) -> None:
    """Give a quantized probe TFLite's parameters where its kernels require or assume them: every
    Softmax output scale 1/256 and zero point -128 (the only ones its int8 Softmax takes), every
    MaxPool / AveragePool output its input's (TFLite's pools keep them, and their C is then the
    pool template, not a requantizing mean)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    g = model.graph
    _quantize_float_pools(g)
    producer = {o: n for n in g.node for o in n.output}
    soft = {n.output[0] for n in g.node if n.op_type == "Softmax"}
    rename = {}
    for n in g.node:
        if n.op_type in groups.POOLS and n.input[0] in producer:
            dq = producer[n.input[0]]
            for q in (m for m in g.node if m.op_type == "QuantizeLinear" and m.input[0] == n.output[0]):
                rename.update({q.input[1]: dq.input[1], q.input[2]: dq.input[2]})
    for n in g.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
    names = {n.input[i]: i for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] in soft
             for i in (1, 2)}
    for init in g.initializer:
        if init.name in names:
            value = np.float32(1 / 256) if names[init.name] == 1 else np.int8(-128)
            init.CopyFrom(numpy_helper.from_array(np.array(value), init.name))
    onnx.save(model, path)


FLOAT_LEFT = frozenset({"AveragePool", "ReduceMean"})  # ops onnxruntime's quantizer leaves float


def _quantize_float_pools(g) -> None:  # noqa: ANN001 (onnx.GraphProto)
    """onnxruntime leaves an AveragePool or a ReduceMean in float: put it between Q -> DQ and
    Q -> DQ of one int8 scale and zero point (the probe's inputs are non-negative), as a TFLite
    model has it."""
    from onnx import TensorProto, helper

    nodes = list(g.node)
    del g.node[:]
    for n in nodes:
        if n.op_type not in FLOAT_LEFT or any(m.output[0] == n.input[0] for m in nodes
                                              if m.op_type == "DequantizeLinear"):
            g.node.append(n)
            continue
        s, z = f"{n.name}_qs", f"{n.name}_qz"
        g.initializer.extend([helper.make_tensor(s, TensorProto.FLOAT, [], [0.02]),
                              helper.make_tensor(z, TensorProto.INT8, [], [-128])])
        x, y = n.input[0], n.output[0]
        g.node.extend([
            helper.make_node("QuantizeLinear", [x, s, z], [f"{x}_q8"], name=f"{n.name}_qi"),
            helper.make_node("DequantizeLinear", [f"{x}_q8", s, z], [f"{x}_d8"], name=f"{n.name}_di"),
        ])
        n.input[0], n.output[0] = f"{x}_d8", f"{y}_f"
        g.node.append(n)
        g.node.extend([
            helper.make_node("QuantizeLinear", [f"{y}_f", s, z], [f"{y}_q8"], name=f"{n.name}_qo"),
            helper.make_node("DequantizeLinear", [f"{y}_q8", s, z], [y], name=f"{n.name}_do"),
        ])


def calibrate_target(target: str, found: list[tuple[str, list, float]] | None = None) -> dict:
    """The fitted figures in instructions (``int8_probe.calibrate_int8c``'s shape)."""
    from opfuse.measure.calibrate.int8_probe import calibrate_int8c

    rows = found if found is not None else measure_kernels(target)
    return calibrate_int8c(lambda: rows)


def table_lines(target: str, figures: dict, clock_hz: float) -> list[str]:
    """``[perf.int8c]`` in seconds at ``clock_hz`` (the target file's ``[perf].clock_hz``)."""
    cpi = CYCLES_PER_INSTRUCTION[target]
    per_s = cpi / clock_hz
    lines = [BEGIN,
             f"# {figures.get('kernels', 0)} probe kernels (opfuse.measure.calibrate.int8_probe.CASES) counted "
             f"on [board] under QEMU -icount, fitted per C path in instructions;",
             f"# seconds = instructions x {cpi} cycles per instruction (opfuse.measure.calibrate.mcu_probe: "
             f"CYCLES_PER_INSTRUCTION, sourced there) / clock_hz",
             "[perf.int8c]",
             f"dispatch_overhead_s = {figures.get('dispatch_overhead_s', 0.0) * per_s:.4g}"
             f"  # {figures.get('dispatch_overhead_s', 0.0):.1f} instructions"]
    units = {"mac_s": "per MAC", "tail_s": "per tail MAC", "output_s": "per output",
             "loop_s": "per loop"}
    return lines + figure_rows("int8c", figures, units, per_s) + [END]


def figure_rows(section: str, figures: dict, units: dict[str, str], per_s: float) -> list[str]:
    """The sub-tables ``[perf.<section>.<table>]`` of fitted figures (instructions), written in
    seconds (``per_s`` a instruction) with the instructions as a comment; a table of zeros left
    out (``[perf.int8c]`` here, ``[perf.floatc]`` in mcu_float_probe.py)."""
    lines = []
    for table, unit in units.items():
        values = {k: v for k, v in figures.get(table, {}).items() if v}
        if not values:
            continue
        lines.append(f"[perf.{section}.{table}]")
        for path, value in sorted(values.items()):
            lines.append(f"{path} = {value * per_s:.4g}  # {value:.3f} instructions {unit}")
    return lines


def write_table(path: Path, lines: list[str], begin: str = BEGIN, end: str = END) -> None:
    """Replace the block between the markers ``begin`` and ``end`` of a target file (the
    ``[perf.int8c]`` table's by default), or insert it before its first ``[[perf.memory]]``
    (where ``[perf]``'s sub-tables go)."""
    text = path.read_text()
    block = "\n".join(lines) + "\n"
    marked = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n", re.S)
    if marked.search(text):
        text = marked.sub(lambda _: block, text)
    else:
        at = text.index("[[perf.memory]]")
        text = text[:at] + block + "\n" + text[at:]
    path.write_text(text)


def predicted_instructions(predicted_cycles: float, target: str) -> float:
    """The instructions a predicted cycle count stands for (the assumed CPI undone)."""
    return predicted_cycles / CYCLES_PER_INSTRUCTION[target]
