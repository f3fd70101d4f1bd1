"""The shared int8 models on the emulated Cortex-M boards beside TFLite Micro with CMSIS-NN
(``python benchmarks/mcu.py --int8``; issue 20's table).

Per model and board (cortex-m7 on mps2-an500, cortex-m4 on mps2-an386): the invoke total in
instructions (QEMU ``-icount``, as ``opfuse validate --backend c --emulate`` counts them), layer by
layer (``--no-cascades``) and by default (cascades where they lower the arena), beside TFLite Micro + CMSIS-NN's and the ratio; the default
run's instructions per kernel family; the arena (OPFUSE_ARENA_BYTES + stack scratch) and flash
(code + weights, from the ELF) beside TFLite Micro's. Every run is checked bit-exact against
TFLite Micro on 2 seeded inputs. Then the Cortex-M cost model: per kernel of the layer-by-layer
runs, the instructions measured over the instructions ``[perf.int8c]`` predicts (the predicted cycles over
the assumed cycles per instruction, opfuse.measure.calibrate.mcu_probe; the compute term and dispatch,
``KernelCost.executed_s``: QEMU models no flash wait states, and on cortex-m55 the fully connected
kernels are priced at the xSPI flash's bandwidth, 3-5x their compute), median and worst; kernels that are
views (no code runs) are left out. ``--json PATH`` (``benchmarks/mcu.py --int8``) writes those
kernels and their instructions: tests/data/mcu_int8_kernels.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import onnx_ir as ir

from opfuse.backends.c.emit import c_schedule
from opfuse.cost.cwork import is_view
from opfuse.measure.calibrate.mcu_probe import CYCLES_PER_INSTRUCTION, predicted_instructions
from opfuse.measure.run.qemu import emulate_c
from opfuse.pipeline import compile_model

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tflite"
BOARDS = {"cortex-m7": "mps2-an500", "cortex-m4": "mps2-an386", "cortex-m33": "mps2-an505",
          "cortex-m55": "mps3-an547"}
# a target without TFLite Micro figures is compared with the same model on this one, whose
# kernels it shares (cortex-m33 runs the armv7em ISA module as cortex-m4 does)
SAME_KERNELS = {"cortex-m33": "cortex-m4"}

# Facts from issue 20 (not measured here): instructions per inference of TFLite Micro
# (tflite-micro 90b983c2) with CMSIS-NN kernels (4ab83cc, OPTIMIZED_KERNEL_DIR=cmsis_nn, release
# build, kernels -O2), arm-none-eabi-gcc 12.2.1, on the same QEMU boards and counting method;
# then TFLite Micro's arena_used_bytes and its ELF's flash (model included).
PEER = {
    ("kws_ref_model", "cortex-m7"): (7_645_548, 22_820, 106_300),
    ("vww_96_int8", "cortex-m7"): (24_025_156, 100_708, 385_652),
    ("pretrainedResnet_quant", "cortex-m7"): (30_025_987, 54_996, 148_884),
    ("ad01_int8", "cortex-m7"): (583_164, 2_580, 303_188),
    ("person_detect", "cortex-m7"): (22_715_452, 82_308, 343_060),
    ("mcunet_vww", "cortex-m7"): (47_794_828, 219_808, 669_828),
    ("kws_ref_model", "cortex-m4"): (7_699_734, 22_820, 107_948),
    ("vww_96_int8", "cortex-m4"): (24_101_542, 100_708, 387_300),
    ("pretrainedResnet_quant", "cortex-m4"): (29_863_147, 54_996, 150_312),
    ("ad01_int8", "cortex-m4"): (582_864, 2_580, 305_716),
    ("person_detect", "cortex-m4"): (22_928_024, 82_308, 344_804),
    ("mcunet_vww", "cortex-m4"): (48_625_576, 219_808, 672_036),
    # cortex-m55 (given by a user, not measured here): TFLite Micro 90b983c2 + CMSIS-NN 4ab83cc
    # with its MVE (Helium) kernels, release, -mcpu=cortex-m55, arm-none-eabi-gcc 12.2, QEMU 7.2
    # mps3-an547 -icount shift=6; instructions and arena_used_bytes; flash not given (None: "-")
    ("kws_ref_model", "cortex-m55"): (1_813_563, 27_348, None),
    ("vww_96_int8", "cortex-m55"): (6_557_923, 100_772, None),
    ("pretrainedResnet_quant", "cortex-m55"): (4_910_950, 55_028, None),
    ("ad01_int8", "cortex-m55"): (149_924, 9_268, None),
    ("person_detect", "cortex-m55"): (6_507_717, 82_356, None),
    ("mcunet_vww", "cortex-m55"): (11_957_808, 219_856, None),
}
MODELS = ("kws_ref_model", "vww_96_int8", "pretrainedResnet_quant", "ad01_int8", "person_detect",
          "mcunet_vww")
FAMILIES = ("conv 1x1", "conv general", "depthwise", "fully connected", "pools", "elementwise",
            "requantize", "other")
POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean"})
REQUANT = frozenset({"QuantizeLinear", "DequantizeLinear", "Cast"})
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Relu", "Clip", "Sigmoid", "Tanh", "HardSwish",
                         "LeakyRelu"})


def family(members: list[ir.Node]) -> str:
    """The family of a kernel by its first node (a fused epilogue goes with its anchor)."""
    head = members[0]
    if head.op_type == "Conv":
        ws = head.inputs[1].shape
        a = head.attributes.get("group")
        group = a.as_int() if a is not None else 1
        if group > 1 and ws is not None and ws[1] == 1:
            return "depthwise"
        return "conv 1x1" if ws is not None and tuple(ws[2:]) == (1, 1) else "conv general"
    if head.op_type in ("Gemm", "MatMul"):
        return "fully connected"
    if head.op_type in POOLS:
        return "pools"
    if head.op_type in REQUANT:
        return "requantize"
    return "elementwise" if head.op_type in ELEMENTWISE else "other"


def run(name: str, target: str, cascades: bool) -> dict:
    result = compile_model(str(SHARED / f"{name}.tflite"), target)
    emu = emulate_c(result, trials=2, cascades=cascades)
    sched = c_schedule(result, cascades=cascades)
    model, part = sched.model, sched.partition
    nodes = {n.name: n for n in model.graph}
    by_family = dict.fromkeys((*FAMILIES, "cascade"), 0)
    kernels = []
    for kernel, count in zip(part.kernels, emu.kernels, strict=True):
        members = [nodes[n] for n in kernel.nodes if n in nodes]
        fam = "cascade" if kernel.is_cascade else family(members)
        by_family[fam] += count.instructions
        if not is_view(members) and count.executed_cycles:
            kernels.append((fam, kernel.name, count.instructions,
                            predicted_instructions(count.executed_cycles, target),
                            {"model": name, "target": target, "kernel": kernel.name,
                             "ops": [n.op_type for n in members],
                             "instructions": count.instructions}))
    fp = emu.footprint
    return {"total": emu.instructions, "exact": emu.report.ok
            and all(o.max_abs_err == 0 for o in emu.report.outputs),
            "families": by_family, "kernels": kernels,
            "arena": emu.arena_bytes + fp.stack - emu.board.stack_bytes,  # + stack scratch
            "flash": fp.flash}


def _x(ours: int, peer: int) -> str:
    return f"{ours:>12,} ({ours / peer:4.2f}x)"


def print_table(runs: dict) -> None:
    print("instructions per inference (QEMU -icount), bit-exact with TFLite Micro on 2 inputs")
    head = (f"{'model':<24}{'board':<12}{'TFLM+CMSIS-NN':>14}{'--no-cascades':>22}"
            f"{'default (cascades)':>22}  exact")
    print(head)
    print("-" * len(head))
    for (name, target), (d, c) in runs.items():
        exact = "yes" if d["exact"] and c["exact"] else "NO"
        if (name, target) not in PEER:  # no TFLite Micro figures: beside the same kernels' board
            twin = runs.get((name, SAME_KERNELS.get(target, "")))
            vs = (f"{d['total'] / twin[0]['total']:.3f}x / {c['total'] / twin[1]['total']:.3f}x "
                  f"{SAME_KERNELS[target]}'s") if twin else "(no TFLite Micro figures)"
            print(f"{name:<24}{BOARDS[target]:<12}{'-':>14}{d['total']:>22,}{c['total']:>22,}  "
                  f"{exact}  {vs}")
            continue
        peer = PEER[(name, target)][0]
        print(f"{name:<24}{BOARDS[target]:<12}{peer:>14,}{_x(d['total'], peer):>22}"
              f"{_x(c['total'], peer):>22}  {exact}")
    print("\nlayer-by-layer run, instructions per kernel family")
    head = f"{'model':<24}{'board':<12}" + "".join(f"{f:>16}" for f in FAMILIES)
    print(head)
    for (name, target), (d, _) in runs.items():
        print(f"{name:<24}{BOARDS[target]:<12}"
              + "".join(f"{d['families'][f]:>16,}" for f in FAMILIES))
    print("\nfootprint (bytes): opfuse's arena = OPFUSE_ARENA_BYTES + the kernels' stack scratch, "
          "flash = the ELF's code + weights + constants; TFLM's arena_used_bytes and ELF flash "
          "(model included) from issue 20")
    for (name, target), (d, c) in runs.items():
        if (name, target) not in PEER:
            print(f"{name:<24}{BOARDS[target]:<12} arena {d['arena']:>9,} (cascaded "
                  f"{c['arena']:>9,})   flash {d['flash']:>9,}")
            continue
        _, arena, flash = PEER[(name, target)]
        print(f"{name:<24}{BOARDS[target]:<12} arena {d['arena']:>9,} (cascaded {c['arena']:>9,})"
              f" vs {arena:>9,}   flash {d['flash']:>9,} vs "
              f"{'-' if flash is None else format(flash, ','):>9}")


def print_cost(runs: dict) -> dict:
    """Measured / predicted instructions per kernel of the layer-by-layer runs, per board."""
    print("\nCortex-M cost model ([perf.int8c], opfuse.measure.calibrate.mcu_probe): per kernel, measured "
          "instructions / predicted instructions (= predicted cycles / assumed CPI)")
    summary = {}
    for target in BOARDS:
        ks = [k for (_, t), (d, _) in runs.items() if t == target for k in d["kernels"]]
        if not ks:
            continue
        ratios = [m / p for _, _, m, p, _ in ks]
        worst = max(max(r, 1 / r) for r in ratios)
        summary[target] = (statistics.median(ratios), worst)
        print(f"  {target} (CPI {CYCLES_PER_INSTRUCTION[target]}): {len(ks)} kernels, median "
              f"{statistics.median(ratios):.3f}, worst {worst:.2f}x "
              f"(must: median within 1.25x, every kernel within 2x)")
        for fam in FAMILIES:
            r = [x for x, k in zip(ratios, ks, strict=True) if k[0] == fam]
            if r:
                print(f"      {fam:<16}{len(r):>4} kernels, median {statistics.median(r):6.3f}, "
                      f"range {min(r):.2f} .. {max(r):.2f}")
        off = sorted(zip(ratios, ks, strict=True), key=lambda t: -max(t[0], 1 / t[0]))[:3]
        for r, (fam, kname, m, p, _) in off:
            print(f"      furthest: {kname} ({fam}) {m:,} measured vs {p:,.0f} predicted ({r:.2f})")
    return summary


def write_kernels(runs: dict, path: Path) -> None:
    """The layer-by-layer runs' kernels and their measured instructions as JSON:
    tests/data/mcu_int8_kernels.json, which tests/test_mcu_cost.py prices with the committed
    [perf.int8c] tables (re-write it when the int8 C changes: the measurements are its)."""
    rows = [k[4] for d, _ in runs.values() for k in d["kernels"]]
    note = ("python benchmarks/mcu.py --int8 --json PATH: per kernel of the layer-by-layer run "
            "of each shared int8 model on each board, QEMU -icount instructions")
    lines = ",\n".join("  " + json.dumps(r) for r in rows)  # one kernel a line
    path.write_text(f'{{"note": {json.dumps(note)},\n "kernels": [\n{lines}\n]}}\n')


def main(models: list[str], targets: list[str], kernels_json: str | None = None) -> None:
    runs = {}
    for target in targets:
        for name in models or MODELS:
            if not (SHARED / f"{name}.tflite").exists():
                print(f"  {name}: ../shared/models not present, skipped", file=sys.stderr)
                continue
            t0 = time.perf_counter()
            runs[(name, target)] = (run(name, target, False), run(name, target, True))
            print(f"  {name} on {target}: {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    print_table(runs)
    print_cost(runs)
    if kernels_json:
        write_kernels(runs, Path(kernels_json))
