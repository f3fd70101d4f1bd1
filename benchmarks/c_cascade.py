"""Cascaded C vs layer-by-layer fused C vs unfused C vs onnxruntime ORT_ENABLE_ALL (one thread each).

    python benchmarks/c_cascade.py [--repeats N] [MODEL ...]

The same canonicalized model on x86-host three ways: ``emit_c(cascades=True)`` (cascades streamed
in bands through ring buffers: the arena analyze reports), ``emit_c()`` (the same kernels layer by
layer, the default) and ``emit_c(fuse=False)`` (one kernel per node); plus onnxruntime. Timed as
``benchmarks/c_backend.py`` times C: ``opfuse_model_invoke()`` after writing the inputs into the
arena (untimed), variants alternating every repetition, medians. The arena column is
OPFUSE_ARENA_BYTES of each variant.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import onnxruntime as ort

from opfuse.backends.c import emit_c
from opfuse.backends.c.check import reference
from opfuse.backends.c.runner import CModel, build_shared
from opfuse.pipeline import compile_model
from opfuse.runtime import one_thread_session

MODELS = ("mobilenet_v2", "resnet18", "ds_cnn")
VARIANTS = {"cascaded": {"cascades": True}, "fused": {}, "unfused": {"fuse": False}}


def measure(name: str, repeats: int) -> dict:
    result = compile_model(name, "x86-host")
    feeds, _, _ = reference(result.source)
    runners, before, arena = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="opfuse-cascade-bench-") as tmp:
        for key, options in VARIANTS.items():
            folder = Path(tmp) / key
            arena[key] = emit_c(result, folder, **options).arena_bytes
            model = CModel(build_shared(folder))
            bound = model.bind(feeds)
            before[key] = lambda m=model, b=bound: m.write(b)
            runners[key] = model.invoke
        session = one_thread_session(result.proto.SerializeToString(),
                                     ort.GraphOptimizationLevel.ORT_ENABLE_ALL)  # fmt: skip
        runners["ort"] = lambda: session.run(None, feeds)
        times: dict[str, list[float]] = {k: [] for k in runners}
        for rep in range(repeats + 2):
            for key, fn in runners.items():
                if key in before:
                    before[key]()
                t0 = time.perf_counter()
                fn()
                if rep >= 2:
                    times[key].append(time.perf_counter() - t0)
    out = {k: statistics.median(v) for k, v in times.items()}
    return {"model": name, "s": out, "arena": arena}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    head = (f"{'model':<14}{'cascaded ms':>12}{'fused ms':>10}{'unfused ms':>12}{'ORT all ms':>12}"
            f"{'casc/unf':>9}{'casc/ORT':>9}{'arena casc':>12}{'arena fused':>12}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for name in args.models:
        r = measure(name, args.repeats)
        s, a = r["s"], r["arena"]
        print(f"{name:<14}{s['cascaded'] * 1e3:>12.2f}{s['fused'] * 1e3:>10.2f}"
              f"{s['unfused'] * 1e3:>12.2f}{s['ort'] * 1e3:>12.2f}"
              f"{s['unfused'] / s['cascaded']:>8.2f}x{s['cascaded'] / s['ort']:>8.2f}x"
              f"{a['cascaded']:>12,}{a['fused']:>12,}", flush=True)  # fmt: skip
    print("casc/unf = unfused C / cascaded C (speedup); casc/ORT = cascaded C / ORT_ENABLE_ALL")


if __name__ == "__main__":
    main()
