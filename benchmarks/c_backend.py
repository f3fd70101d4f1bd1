"""Fused vs unfused generated C, and fused C vs onnxruntime (one thread each).

    python benchmarks/c_backend.py [--repeats N] [MODEL ...]

For each model: warm latency of fused C, unfused C (the same canonicalized model, one kernel per
node), onnxruntime ORT_ENABLE_ALL and ORT_DISABLE_ALL, measured in one run in alternating blocks
(each runner runs a block of runs back to back, the block's first run is dropped, the order
reverses every block; opfuse.runtime.block_timings): the median of the block medians, and the
spread of the block medians in percent; then the fusion speedup (aim >= 1.3x on mobilenet_v2) and fused C / ORT_ENABLE_ALL
(aim: within 2x). Numbers are from the machine it runs on; a shared or loaded machine is noisy.

The C variants are timed on ``opfuse_model_invoke()``, the zero-copy API (inputs written into the
arena through ``opfuse_model_input`` before each repetition, untimed, as a deployed application's
producer writes them; outputs read in place), see ``opfuse.backends.c.check.bench``.
"""

from __future__ import annotations

import argparse
import json

from opfuse.backends.c import bench

MODELS = ("mobilenet_v2", "resnet18", "ds_cnn", "seed_pipeline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=50, help="timed runs per runner")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args()
    rows = []
    head = (f"{'model':<15}{'fused C ms':>16}{'unfused C ms':>18}{'ORT all ms':>16}"
            f"{'ORT none ms':>17}{'fusion x':>10}{'C/ORT all':>11}")
    print(head)
    print("-" * len(head))
    for name in args.models:
        r = bench(name, repeats=args.repeats, blocks=args.blocks)
        rows.append(r)
        cells = "".join(
            f"{r[k] * 1e3:>{w - 6}.3f} ({r[k[:-2] + '_spread'] * 100:3.0f}%)"
            for k, w in (("fused_c_s", 16), ("unfused_c_s", 18), ("ort_all_s", 16),
                         ("ort_disabled_s", 17)))
        print(f"{name:<15}{cells}{r['fusion_speedup']:>9.2f}x{r['fused_c_vs_ort_all']:>10.2f}x",
              flush=True)
    print(f"ms: median of {args.blocks} block medians (warm, first run of each block dropped); "
          "(n%): spread of the block medians")
    print("fusion x = unfused C / fused C (same model, same kernels, only kernel boundaries "
          "differ); C/ORT all = fused C / onnxruntime ORT_ENABLE_ALL, one thread")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
