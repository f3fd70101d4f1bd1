"""int8 models: generated C vs TFLite Micro's interpreter and vs onnxruntime, and the arenas.

    python benchmarks/int8.py [--repeats N] [--json PATH] [MODEL.tflite ...]

Per int8 .tflite model (default: every one in ../shared/models/tflite), one thread each, measured
in one run with the runners alternating every repetition, medians:

* the generated int8 C (fused), timed on ``opfuse_model_invoke()`` (inputs written into the arena
  before each repetition, untimed);
* TFLite Micro's Python interpreter on the same .tflite, timed on ``invoke()`` (its reference
  kernels; the interpreter's own Python call overhead is part of it);
* onnxruntime ORT_ENABLE_ALL on the emitted QDQ ONNX (``opfuse compile MODEL -o OUT.onnx``), timed
  on ``run``.

Then ``OPFUSE_ARENA_BYTES`` beside TFLite Micro's arena for the same model: its non-persistent
"head" (the tensors' arena) and its total, from ``print_allocations``.
Aims (issue 8): C at least 10x faster than TFLite Micro; C within 1.5x of onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tflite"


def tflm_arena(path: Path) -> tuple[int, int]:
    """(head, total) bytes of TFLite Micro's arena for ``path`` (print_allocations, in a child
    process: it prints from C++)."""
    code = ("from tflite_micro.python.tflite_micro import runtime\n"
            f"runtime.Interpreter.from_file({str(path)!r}).print_allocations()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    text = out.stdout + out.stderr
    head = re.search(r"allocation head (\d+) bytes", text)
    total = re.search(r"allocation total (\d+) bytes", text)
    return (int(head.group(1)) if head else -1, int(total.group(1)) if total else -1)


def bench_model(path: Path, repeats: int, warmup: int = 2) -> dict:
    import numpy as np
    import onnxruntime as ort
    from tflite_micro.python.tflite_micro import runtime

    from opfuse import api
    from opfuse.backends.c import emit_c
    from opfuse.measure.run.host import CModel, build_shared
    from opfuse.measure.sessions import one_thread_session
    from opfuse.measure.validate.tflite_reference import TfliteReference

    result = api.compile(path)
    ref = TfliteReference(path)
    feeds = ref.random_inputs(0)
    with tempfile.TemporaryDirectory(prefix="opfuse-int8-bench-") as tmp:
        emitted = emit_c(result, Path(tmp) / "c", cascades=False)  # the README row: layer by layer
        model = CModel(build_shared(Path(tmp) / "c"))
        bound = model.bind(feeds)
        interp = runtime.Interpreter.from_file(str(path))
        arrays = [np.ascontiguousarray(feeds[s.name], dtype=s.dtype) for s in ref.inputs]
        sess = one_thread_session(api.emit(result), ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}

        def tflm() -> None:
            for i, a in enumerate(arrays):
                interp.set_input(a, i)
            t0 = time.perf_counter()
            interp.invoke()
            return time.perf_counter() - t0

        def c() -> float:
            model.write(bound)
            t0 = time.perf_counter()
            model.invoke()
            return time.perf_counter() - t0

        def onnxrt() -> float:
            t0 = time.perf_counter()
            sess.run(None, ort_feeds)
            return time.perf_counter() - t0

        runners = {"c_s": c, "tflm_s": tflm, "ort_all_s": onnxrt}
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(warmup):
            for fn in runners.values():
                fn()
        for _ in range(repeats):
            for key, fn in runners.items():
                times[key].append(fn())
    out = {k: statistics.median(v) for k, v in times.items()}
    head, total = tflm_arena(path)
    out.update({
        "model": path.stem,
        "repeats": repeats,
        "tflm_over_c": out["tflm_s"] / out["c_s"],
        "c_over_ort_all": out["c_s"] / out["ort_all_s"],
        "arena_bytes": emitted.arena_bytes,
        "tflm_arena_head": head,
        "tflm_arena_total": total,
    })
    return out


def int8_models() -> list[Path]:
    from opfuse.measure.validate.tflite_reference import TfliteReference

    return [p for p in sorted(SHARED.glob("*.tflite"))
            if TfliteReference(p).kind == "tflite-micro"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args()
    models = args.models or int8_models()
    head = (f"{'model':<24}{'C ms':>9}{'TFLM ms':>10}{'ORT ms':>9}{'TFLM/C':>8}{'C/ORT':>7}"
            f"{'arena B':>9}{'TFLM head':>10}{'TFLM total':>11}")
    print(head)
    print("-" * len(head))
    rows = []
    for path in models:
        r = bench_model(Path(path), args.repeats)
        rows.append(r)
        print(f"{r['model']:<24}{r['c_s'] * 1e3:>9.3f}{r['tflm_s'] * 1e3:>10.3f}"
              f"{r['ort_all_s'] * 1e3:>9.3f}{r['tflm_over_c']:>8.1f}{r['c_over_ort_all']:>7.2f}"
              f"{r['arena_bytes']:>9}{r['tflm_arena_head']:>10}{r['tflm_arena_total']:>11}",
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
