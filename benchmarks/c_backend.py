"""Fused, unfused and cascaded generated C, and the C against onnxruntime (one thread each).

    python benchmarks/c_backend.py [--repeats N] [--blocks B] [--json PATH] [MODEL ...]

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

from opfuse.measure.validate.c_float import bench

MODELS = ("mobilenet_v2", "resnet18", "ds_cnn", "seed_pipeline")
COLUMNS = (("fused_c_s", "fused C ms"), ("unfused_c_s", "unfused C ms"),
           ("cascaded_c_s", "cascaded C ms"), ("ort_all_s", "ORT all ms"),
           ("ort_disabled_s", "ORT none ms"))  # fmt: skip
RATIOS = (("fusion_speedup", "fusion x"), ("fused_c_vs_ort_all", "C/ORT"),
          ("cascaded_speedup", "casc x"), ("cascaded_c_vs_ort_all", "casc/ORT"),
          ("cascaded_vs_fused", "casc/fused"))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=50, help="timed runs per runner")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args()
    rows = []
    head = (f"{'model':<15}" + "".join(f"{title:>{len(title) + 9}}" for _, title in COLUMNS)
            + "".join(f"{title:>11}" for _, title in RATIOS))  # fmt: skip
    print(head)
    print("-" * len(head))
    for name in args.models:
        r = bench(name, repeats=args.repeats, blocks=args.blocks, cascaded=True)
        rows.append(r)
        cells = "".join(
            f"{r[k] * 1e3:>{len(title) + 3}.3f} ({r[k[:-2] + '_spread'] * 100:3.0f}%)"
            for k, title in COLUMNS
        )
        ratios = "".join(f"{r[k]:>10.2f}x" for k, _ in RATIOS)
        print(f"{name:<15}{cells}{ratios}", flush=True)
    print(f"ms: median of {args.blocks} block medians (warm, first run of each block dropped); "
          "(n%): spread of the block medians")
    print("fusion x = unfused C / fused C; C/ORT = fused C / ORT_ENABLE_ALL; casc x = unfused C / "
          "cascaded C; casc/ORT = cascaded C / ORT_ENABLE_ALL; casc/fused = fused C / cascaded C "
          "(all one thread, same run)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
