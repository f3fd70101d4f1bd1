"""Fused, unfused and cascaded generated C, and the C against onnxruntime (one thread each).

    python benchmarks/c_backend.py [--repeats N] [--blocks B] [--json PATH] [--target T]
                                   [--models-dir DIR] [--top-kernels K] [MODEL ...]

MODEL is a built-in model's name or a path to an ONNX/TFLite file; ``--models-dir DIR`` adds every
``*.onnx`` in DIR (sorted), e.g. the transformer corpus ``benchmarks/transformer_export.py`` writes.
``--top-kernels K`` then times every kernel of each model's fused C in its full invoke
(``opfuse.measure.run.kernel_times``), sums them by kernel kind (the ops a kernel runs, e.g.
``MatMul+Add``) and prints the K kinds that take the most time, with their count and share of the
sum: where the time goes when a model is far from onnxruntime's.

For each model: warm latency of fused C (layer by layer, ``--emit c --no-cascades``), unfused C
(the same canonicalized model, one kernel per node), cascaded C (the default ``--emit c``: the
partition's cascades streamed in bands of rows through ring buffers, the arena analyze reports),
onnxruntime ORT_ENABLE_ALL and ORT_DISABLE_ALL, measured in one run in alternating blocks (each
runner runs a block of runs back to back, the block's first run is dropped, the order reverses
every block; opfuse.measure.sessions.block_timings): the median of the block medians, and the spread of
the block medians in percent. Then the ratios, all from the same run:

- fusion x   = unfused C / fused C (aim >= 1.3x on mobilenet_v2);
- C/ORT      = fused C / ORT_ENABLE_ALL (aim: within 2x);
- casc x     = unfused C / cascaded C (issue 10's aim on mobilenet_v2: >= 1.3x);
- casc/ORT   = cascaded C / ORT_ENABLE_ALL (issue 10's aim: <= 1.0x);
- casc/fused = fused C / cascaded C (> 1: streaming rows beats layer by layer).

Numbers are from the machine it runs on; a shared or loaded machine is noisy: compare ratios.
The C variants are timed on ``opfuse_model_invoke()``, the zero-copy API (inputs written into the
arena through ``opfuse_model_input`` before each repetition, untimed, as a deployed application's
producer writes them; outputs read in place), see ``opfuse.measure.validate.c_float.bench``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from opfuse.measure.validate.c_float import bench, reference
from opfuse.pipeline import DEFAULT_TARGET, compile_model
from opfuse.safe_text import for_terminal

MODELS = ("mobilenet_v2", "resnet18", "ds_cnn", "seed_pipeline")
COLUMNS = (("fused_c_s", "fused C ms"), ("unfused_c_s", "unfused C ms"),
           ("cascaded_c_s", "cascaded C ms"), ("ort_all_s", "ORT all ms"),
           ("ort_disabled_s", "ORT none ms"))  # fmt: skip
RATIOS = (("fusion_speedup", "fusion x"), ("fused_c_vs_ort_all", "C/ORT"),
          ("cascaded_speedup", "casc x"), ("cascaded_c_vs_ort_all", "casc/ORT"),
          ("cascaded_vs_fused", "casc/fused"))  # fmt: skip


def _label(model: str) -> str:
    """The row's name: a built-in model's name, or a file's stem (made safe for the terminal)."""
    return for_terminal(Path(model).stem if Path(model).suffix else model)


def _models(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    found = sorted(str(p) for p in Path(args.models_dir).glob("*.onnx")) if args.models_dir else []
    if args.models_dir and not found:
        parser.error(f"--models-dir {for_terminal(args.models_dir)}: no .onnx file in it")
    return [*args.models, *found] if args.models or found else list(MODELS)


def top_kernels(model: str, target: str, count: int, budget_s: float = 2.0) -> list[str]:
    """Lines naming the ``count`` kernel kinds (ops) of ``model``'s fused C that take the most
    time, each kernel timed as it runs in the full invoke, summed by kind (module docstring)."""
    from opfuse.backends.c.emit import emit_c
    from opfuse.measure.run.host import manifest
    from opfuse.measure.run.kernel_times import time_kernels

    result = compile_model(model, target)
    feeds, _, _ = reference(result.source)
    with tempfile.TemporaryDirectory(prefix="opfuse-topk-") as tmp:
        emit_c(result, Path(tmp), cascades=False)
        entries = {k.index: k for k in manifest(Path(tmp)).kernel_outputs}
        times = time_kernels(tmp, feeds, budget_s=budget_s)
    total = times.total_s or 1.0
    groups: dict[str, list[float]] = {}
    for index, seconds in enumerate(times.seconds):
        entry = entries.get(index)
        groups.setdefault("+".join(entry.ops) if entry is not None else "?", []).append(seconds)
    ranked = sorted(groups.items(), key=lambda g: -sum(g[1]))[:count]
    lines = [f"  {_label(model)}: {len(times.seconds)} kernels, sum {total * 1e3:.3f} ms "
             f"({times.runs} runs)"]
    for ops, seconds in ranked:
        lines.append(f"    {sum(seconds) * 1e3:8.3f} ms {sum(seconds) / total * 100:5.1f}%  "
                     f"{len(seconds):4d} x {for_terminal(ops)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="built-in names or model paths")
    parser.add_argument("--models-dir", help="also every *.onnx in this folder")
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--repeats", type=int, default=50, help="timed runs per runner")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--top-kernels", type=int, default=0, metavar="K",
                        help="then the K slowest kernels of each model's fused C")
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args()
    models = _models(args, parser)
    rows = []
    head = (f"{'model':<18}{'kernels':>8}{'arena KiB':>10}" + "".join(f"{title:>{len(title) + 9}}" for _, title in COLUMNS)
            + "".join(f"{title:>11}" for _, title in RATIOS))  # fmt: skip
    print(head)
    print("-" * len(head))
    for name in models:
        r = bench(name, args.target, repeats=args.repeats, blocks=args.blocks, cascaded=True)
        rows.append(r)
        cells = "".join(
            f"{r[k] * 1e3:>{len(title) + 3}.3f} ({r[k[:-2] + '_spread'] * 100:3.0f}%)"
            for k, title in COLUMNS
        )
        ratios = "".join(f"{r[k]:>10.2f}x" for k, _ in RATIOS)
        size = f"{r['fused_kernels']:>8}{r['fused_arena_bytes'] / 1024:>10.0f}"
        print(f"{_label(name):<18}{size}{cells}{ratios}", flush=True)
    print("kernels, arena: fused C's (layer by layer, OPFUSE_ARENA_BYTES)")
    print(f"ms: median of {args.blocks} block medians (warm, first run of each block dropped); "
          "(n%): spread of the block medians")
    print("fusion x = unfused C / fused C; C/ORT = fused C / ORT_ENABLE_ALL; casc x = unfused C / "
          "cascaded C; casc/ORT = cascaded C / ORT_ENABLE_ALL; casc/fused = fused C / cascaded C "
          "(all one thread, same run)")
    if args.top_kernels > 0:
        print(f"the {args.top_kernels} kernel kinds taking most of each model's fused C (kernel "
              "medians in the full invoke, summed by ops; share of all kernels' sum):")
        for name in models:
            print("\n".join(top_kernels(name, args.target, args.top_kernels)), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
