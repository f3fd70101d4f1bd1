"""The generated C on emulated Cortex-M boards: footprint per model and target against the limits,
and per-kernel QEMU instruction counts against the cost model's predicted cycles.

    python benchmarks/mcu.py [--targets cortex-m4,cortex-m7] [--timeout S] [--json PATH]
                             [--cascades] [MODEL ...]
    python benchmarks/mcu.py --int8 [--targets ...] [MODEL ...]

``--int8``: the shared int8 models beside TFLite Micro + CMSIS-NN (benchmarks/mcu_int8.py: invoke
totals default and cascaded, per kernel family, footprint, and the Cortex-M cost model's error).

For each model and target (built-ins, ../shared/models/onnx and /tflite by default): the ELF's flash and
RAM (``arm-none-eabi-gcc`` with the target's flags), the arena in the ELF beside analyze's peak,
the deployed part's limits ([perf]) and the board's ([board]). A model that fits the board is
run in QEMU (``-icount``) and compared with onnxruntime; one that does not is linked for a widened
board to read its footprint, and not run. int8 models are compared with their own reference
(TFLite Micro for .tflite: bit-exact) on 3 seeded inputs.

``--cascades``: the C streams the partition's cascades (emit_c's default) instead of running
layer by layer; the counts are then per cascade.

Counts: QEMU counts instructions, not cycles (no pipeline, memory wait states or FPU latencies are
modelled). Over all kernels of the corpus that ran, per target: the Spearman rank correlation of
instructions with predicted cycles and the median of instructions / predicted cycles, overall and
per kernel class.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from opfuse import models
from opfuse.analysis import analyze
from opfuse.errors import OpfuseError
from opfuse.measure.run.footprint import check_fits
from opfuse.measure.run.qemu import emulate_c, link_footprint, part_limits
from opfuse.pipeline import compile_model

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models"
TARGETS = ("cortex-m4", "cortex-m7")


def default_sources() -> list[str]:
    return (list(models.MODELS) + [str(p) for p in sorted((SHARED / "onnx").glob("*.onnx"))]
            + [str(p) for p in sorted((SHARED / "tflite").glob("*.tflite"))])


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (Spearman)."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    return float(np.corrcoef(ra, rb)[0, 1])


def measure(source: str, target: str, timeout_s: float,
            cascades: bool = False) -> tuple[dict, list[dict]]:
    name = Path(source).stem if source.endswith((".onnx", ".tflite")) else source
    row: dict = {"model": name, "target": target}
    kernels: list[dict] = []
    t0 = time.perf_counter()
    try:
        result = compile_model(source, target)
        analysis = analyze(result, cascades=cascades)  # the partition the C runs
        after = analysis.to_json()["after"]
        row.update(peak_arena=after["peak_arena_bytes"], limits=part_limits(result.target))
        fp, info = link_footprint(result, cascades=cascades)
        try:
            check_fits(result.target.board, info, name)
        except OpfuseError:
            row["run"] = "does not fit the board"
        else:
            emu = emulate_c(result, timeout_s=timeout_s, cascades=cascades)
            fp = emu.footprint
            row["run"] = "match" if emu.report.ok else "MISMATCH"
            row["instructions"] = emu.instructions
            costs = analysis.kernels
            for k, c in zip(emu.kernels, costs, strict=True):
                kernels.append({"model": name, "target": target, "kernel": k.name,
                                "class": c.kernel_class, "instructions": k.instructions,
                                "predicted_cycles": k.predicted_cycles})
        row.update(flash=fp.flash, ram=fp.ram, arena=fp.arena,
                   arena_bytes=info.arena_bytes, weights=fp.weights)
    except OpfuseError as exc:
        row["run"] = f"skipped: {str(exc).splitlines()[0][:70]}"
    row["seconds"] = time.perf_counter() - t0
    return row, kernels


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def print_footprint(rows: list[dict]) -> None:
    head = (f"{'model':<34} {'target':<10} {'flash':>12} {'part flash':>11} {'RAM':>11} "
            f"{'part RAM':>9} {'arena ELF':>11} {'OPFUSE_ARENA':>12} {'analyze':>11} "
            f"{'instructions':>13}  run")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "flash" not in r:
            print(f"{r['model'][:34]:<34} {r['target']:<10} {r['run']}")
            continue
        lim = r["limits"]
        over = ("!" if r["flash"] > (lim.get("flash") or 1 << 62) else " ",
                "!" if r["ram"] > (lim.get("ram") or 1 << 62) else " ")
        print(f"{r['model'][:34]:<34} {r['target']:<10} {r['flash']:>12,}{over[0]}"
              f"{_n(lim.get('flash')):>10} {r['ram']:>11,}{over[1]}{_n(lim.get('ram')):>8} "
              f"{r['arena']:>11,} {r['arena_bytes']:>12,} {r['peak_arena']:>11,} "
              f"{_n(r.get('instructions')):>13}  {r['run']}")
    print("(! over the deployed part's limit; arena ELF: the opfuse_arena symbol's size; "
          "analyze: its peak arena)")


def print_counts(kernels: list[dict]) -> dict:
    summary = {}
    print("\nper-kernel QEMU instruction counts (instructions, NOT cycles) vs predicted cycles")
    for target in sorted({k["target"] for k in kernels}):
        ks = [k for k in kernels if k["target"] == target and k["predicted_cycles"]]
        ins = [k["instructions"] for k in ks]
        pred = [k["predicted_cycles"] for k in ks]
        ratios = [i / p for i, p in zip(ins, pred, strict=True)]
        rho = spearman(ins, pred)
        summary[target] = {"kernels": len(ks), "spearman": rho,
                           "median_ratio": statistics.median(ratios)}
        print(f"  {target}: {len(ks)} kernels, Spearman rank correlation {rho:.3f}, "
              f"median instructions / predicted cycles {statistics.median(ratios):.2f}")
        for cls in sorted({k["class"] for k in ks}):
            r = [x for x, k in zip(ratios, ks, strict=True) if k["class"] == cls]
            print(f"      {cls:<12} {len(r):>4} kernels, median ratio {statistics.median(r):7.2f}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=None)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", help="also write the figures as JSON to this path (--int8: "
                        "the kernels' work and instructions, tests/data/mcu_int8_kernels.json)")
    parser.add_argument("--cascades", action="store_true",
                        help="stream the cascades (emit_c's default), not layer by layer")
    parser.add_argument("--int8", action="store_true",
                        help="the shared int8 models vs TFLite Micro + CMSIS-NN (mcu_int8.py)")
    args = parser.parse_args()
    if args.int8:
        from mcu_int8 import main as int8_main  # benchmarks/ is the script's own directory

        int8_main(args.models, args.targets.split(",") if "," in args.targets
                  else [args.targets], args.json)
        return
    rows, kernels = [], []
    for target in args.targets.split(","):
        for source in args.models or default_sources():
            row, ks = measure(source, target, args.timeout, args.cascades)
            rows.append(row)
            kernels.extend(ks)
            print(f"  {row['model']} on {target}: {row['run']} ({row['seconds']:.1f} s)",
                  file=sys.stderr, flush=True)
    print_footprint(rows)
    summary = print_counts(kernels)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "kernels": kernels,
                                               "summary": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
