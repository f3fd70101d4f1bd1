"""Activation arena before and after fusion, for every built-in and shared model.

Before = the op-by-op schedule of the model as imported (every intermediate in memory), planned with
``greedy``. After = the fused schedule on the target, cascades included (rings at band size),
planned with ``greedy-inplace``. The lower bound is the largest sum of live buffers at one step of
the after schedule; peak/LB says how close the placement gets to it (aim <= 1.05). Every plan is
checked with ``verify_allocation``.

Cascades: "layers LB" is the lower bound of the same kernels layer by layer (no cascades, in-place
merges as greedy-inplace makes them), the figure cascades go below; "LB/peak" is how far below;
"+MACs" is the MACs the cascaded schedule adds over layer by layer (row streaming: none).

    python benchmarks/arena.py [--target x86-host] [--precision int8|fp16|fp32|model] [--ram-kib N]
                               [MODEL ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opfuse import models
from opfuse.cost import cost_model
from opfuse.memory import arena_lower_bound, plan_memory, verify_allocation
from opfuse.pipeline import compile_model

SHARED_ONNX = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "onnx"
BYTES = {"int8": 1, "fp16": 2, "fp32": 4, "model": None}
AIM = 1.05


def default_sources() -> list[str]:
    return list(models.MODELS) + [str(p) for p in sorted(SHARED_ONNX.glob("*.onnx"))]


def measure(source: str, target: str, bytes_per_element: int | None) -> dict:
    result = compile_model(source, target)
    before = plan_memory(result.original, result.before, "greedy", bytes_per_element)
    after = plan_memory(result.optimized, result.partition, "greedy-inplace", bytes_per_element)
    for plan in (before, after):
        verify_allocation(plan)
    layers = result.partition.without_cascades()
    layers_lb = arena_lower_bound(result.optimized, layers, bytes_per_element, inplace=True)
    macs = [
        cost_model(result.optimized, part, result.target, arena_bytes=1).macs
        for part in (layers, result.partition)
    ] if result.target.perf is not None else [0, 0]
    return {
        "cascades": len(result.partition.cascades),
        "layers_lb": layers_lb,
        "added_macs": macs[1] - macs[0],
        "macs": macs[0],
        "model": Path(source).stem if source.endswith(".onnx") else source,
        "kernels": (len(result.before.kernels), len(result.partition.kernels)),
        "before": before.peak_bytes,
        "before_lb": before.lower_bound_bytes,
        "after": after.peak_bytes,
        "after_lb": after.lower_bound_bytes,
        "aliases": len(after.aliases),
        "ordering": after.ordering,
    }


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="built-in names or .onnx paths (default: all)")
    parser.add_argument("--target", default="x86-host")
    parser.add_argument("--precision", choices=list(BYTES), default="int8")
    parser.add_argument("--ram-kib", type=float, default=None, help="RAM for a fits column")
    args = parser.parse_args(argv)
    rows = [
        measure(s, args.target, BYTES[args.precision]) for s in args.models or default_sources()
    ]

    head = (
        f"{'model':<46} {'kernels':>9} {'before KiB':>11} {'after KiB':>10} {'LB KiB':>9} "
        f"{'peak/LB':>7} {'saved':>6} {'inplace':>7} {'casc':>4} {'layers LB':>10} {'LB/peak':>7} "
        f"{'+MACs':>6}  ordering"
    )
    if args.ram_kib is not None:
        head += "  fits"
    print(f"arena on {args.target}, {args.precision} activations (16-byte aligned)")
    print("before = greedy, op by op; after = greedy-inplace, fused, cascades streamed in bands;")
    print("LB = lower bound after; layers LB = lower bound of the same kernels without cascades")
    print(head)
    print("-" * len(head))
    worst = 0.0
    for r in rows:
        ratio = r["after"] / r["after_lb"] if r["after_lb"] else 1.0
        worst = max(worst, ratio)
        saved = 1 - r["after"] / r["before"] if r["before"] else 0.0
        line = (
            f"{r['model'][:46]:<46} {r['kernels'][0]:>4}->{r['kernels'][1]:<4} "
            f"{_kib(r['before']):>11} {_kib(r['after']):>10} {_kib(r['after_lb']):>9} "
            f"{ratio:>7.3f} {saved:>6.0%} {r['aliases']:>7} {r['cascades']:>4} "
            f"{_kib(r['layers_lb']):>10} {r['layers_lb'] / max(r['after'], 1):>7.2f} "
            f"{r['added_macs'] / max(r['macs'], 1):>+6.1%}  {r['ordering']}"
        )
        if args.ram_kib is not None:
            line += "  " + ("yes" if r["after"] <= args.ram_kib * 1024 else "NO")
        print(line)
    print(f"worst peak/LB after fusion: {worst:.3f} (aim <= {AIM})")
    return 0 if worst <= AIM else 1


if __name__ == "__main__":
    sys.exit(main())
