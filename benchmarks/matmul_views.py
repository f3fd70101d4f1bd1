"""A Transpose read as a strided view by its MatMul (opfuse/fusion/views.py) vs materialized.

    python benchmarks/matmul_views.py [--repeats N] [--blocks B] [MODEL ...]

For each model: the fused, layer-by-layer C (``--emit c --no-cascades``) as opfuse partitions it
(every Transpose a MatMul consumes joins the MatMul's kernel and is read in place, a right operand
with a contiguous k dim as dot products) and the same C with that join switched off (the
Transpose its own kernel writing the transposed tensor, the MatMul reading it contiguously),
timed in one run in alternating blocks (opfuse.measure.sessions.block_timings) on
``opfuse_model_invoke()``. Printed: kernels, arena bytes and the median of block medians of
each, and the ratio ``materialized / view`` (> 1: the view is faster). Models: built-in names or
ONNX files with float inputs (random normal, seed 0).
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
from pathlib import Path

import numpy as np

from opfuse.backends.c import emit_c
from opfuse.measure.calibrate.host import cpu_name
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.sessions import block_timings
from opfuse.pipeline import compile_model

MODELS = ("tiny_transformer",)
# the module, not the function opfuse.fusion re-exports under the same name
partition_module = importlib.import_module("opfuse.fusion.partition")


def _build(source: str, folder: Path, views: bool) -> tuple[CModel, int, int]:
    real = partition_module.reads_as_view
    if not views:  # the "before": the partitioner never takes a Transpose as a view
        partition_module.reads_as_view = lambda *args: False
    try:
        emitted = emit_c(compile_model(source), folder, cascades=False)
    finally:
        partition_module.reads_as_view = real
    return CModel(build_shared(folder)), emitted.kernels, emitted.arena_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=50, help="timed runs per variant")
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; one thread, gcc -O3")
    print(f"{'model':<24}{'variant':<14}{'kernels':>8}{'arena B':>12}{'median ms':>11}"
          f"{'spread':>8}")
    for source in args.models:
        rng = np.random.default_rng(0)
        with tempfile.TemporaryDirectory(prefix="opfuse-views-") as tmp:
            built = {key: _build(source, Path(tmp) / key, key == "view")
                     for key in ("view", "materialized")}
            feeds = {x["name"]: rng.standard_normal(x["shape"]).astype(np.float32)
                     for x in built["view"][0].info["inputs"]}
            bound = {k: m.bind(feeds) for k, (m, _, _) in built.items()}
            before = {k: (lambda m=m, b=bound[k]: m.write(b)) for k, (m, _, _) in built.items()}
            runners = {k: m.invoke for k, (m, _, _) in built.items()}
            per_block = max(2, args.repeats // max(args.blocks, 1))
            timing = block_timings(runners, args.blocks, per_block, before)
        name = Path(source).stem
        for key, (_, kernels, arena) in built.items():
            t = timing[key]
            print(f"{name:<24}{key:<14}{kernels:>8}{arena:>12,}{t.median_s * 1e3:>11.3f}"
                  f"{t.spread * 100:>7.1f}%")
        ratio = timing["materialized"].median_s / timing["view"].median_s
        print(f"{name:<24}materialized / view: {ratio:.2f}x")


if __name__ == "__main__":
    main()
