"""Cascaded C vs layer-by-layer fused C vs unfused C vs onnxruntime, with the arenas beside.

    python benchmarks/c_cascade.py [--repeats N] [--blocks B] [MODEL ...]

The timing is ``benchmarks/c_backend.py``'s (one call of ``opfuse.measure.validate.c_float.bench`` with
``cascaded=True``: the same alternating blocks, medians of block medians, one thread each), so
the two scripts agree; this one adds the arena of each C variant (OPFUSE_ARENA_BYTES: cascaded =
analyze's peak with cascades, fused = the layer-by-layer plan) and drops ORT_DISABLE_ALL.
"""

from __future__ import annotations

import argparse

from opfuse.measure.validate.c_float import bench

MODELS = ("mobilenet_v2", "resnet18", "ds_cnn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    head = (f"{'model':<14}{'cascaded ms':>12}{'fused ms':>10}{'unfused ms':>12}{'ORT all ms':>12}"
            f"{'casc/unf':>9}{'casc/ORT':>9}{'arena casc':>12}{'arena fused':>12}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for name in args.models:
        r = bench(name, repeats=args.repeats, blocks=args.blocks, cascaded=True)
        print(f"{name:<14}{r['cascaded_c_s'] * 1e3:>12.2f}{r['fused_c_s'] * 1e3:>10.2f}"
              f"{r['unfused_c_s'] * 1e3:>12.2f}{r['ort_all_s'] * 1e3:>12.2f}"
              f"{r['cascaded_speedup']:>8.2f}x{r['cascaded_c_vs_ort_all']:>8.2f}x"
              f"{r['cascaded_arena_bytes']:>12,}{r['fused_arena_bytes']:>12,}", flush=True)  # fmt: skip
    print("casc/unf = unfused C / cascaded C (speedup); casc/ORT = cascaded C / ORT_ENABLE_ALL")


if __name__ == "__main__":
    main()
