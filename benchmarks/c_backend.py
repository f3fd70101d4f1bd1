"""Fused vs unfused generated C, and fused C vs onnxruntime (one thread each).

    python benchmarks/c_backend.py [--repeats N] [MODEL ...]

For each model: median latency of fused C, unfused C (the same canonicalized model, one kernel per
node), onnxruntime ORT_ENABLE_ALL and ORT_DISABLE_ALL, measured in one run with the variants
alternating; then the fusion speedup (aim >= 1.3x on mobilenet_v2) and fused C / ORT_ENABLE_ALL
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
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args()
    rows = []
    head = (f"{'model':<15}{'fused C ms':>12}{'unfused C ms':>14}{'ORT all ms':>12}"
            f"{'ORT none ms':>13}{'fusion x':>10}{'C/ORT all':>11}")
    print(head)
    print("-" * len(head))
    for name in args.models:
        r = bench(name, repeats=args.repeats)
        rows.append(r)
        print(f"{name:<15}{r['fused_c_s'] * 1e3:>12.3f}{r['unfused_c_s'] * 1e3:>14.3f}"
              f"{r['ort_all_s'] * 1e3:>12.3f}{r['ort_disabled_s'] * 1e3:>13.3f}"
              f"{r['fusion_speedup']:>9.2f}x{r['fused_c_vs_ort_all']:>10.2f}x", flush=True)
    print("fusion x = unfused C / fused C (same model, same kernels, only kernel boundaries "
          "differ); C/ORT all = fused C / onnxruntime ORT_ENABLE_ALL, one thread")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
