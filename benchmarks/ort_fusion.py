"""Does our --ort output, run with onnxruntime's optimizer off, keep up with onnxruntime's own fusions?

For each model, four variants run on one thread (intra_op 1, inter_op 1, sequential), alternating
inside one loop (in a rotating order) so machine noise hits all of them alike:

    (a) original, ORT_ENABLE_EXTENDED      onnxruntime's own fusions
    (b) opfuse --ort, ORT_DISABLE_ALL      our kernels as FusedConv/FusedGemm
    (c) opfuse standard, ORT_DISABLE_ALL   canonicalized only (BN folded, ...), no fused ops
    (d) original, ORT_DISABLE_ALL          nothing fused

Goal: (a)/(b) >= 1, i.e. we capture every fusion onnxruntime makes at EXTENDED. The op-type counts
of onnxruntime's EXTENDED-optimized graph are printed beside ours to show it.

    python benchmarks/ort_fusion.py [--models mobilenet_v2 resnet18] [--runs 50] [--warmup 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from opfuse.backends.onnx import emit_onnx
from opfuse.measure.sessions import DISABLE_ALL, ENABLE_EXTENDED, one_thread_session
from opfuse.measure.validate.ort import random_inputs
from opfuse.pipeline import compile_model, source_proto

VARIANTS = ("a: original EXTENDED", "b: opfuse --ort OFF", "c: opfuse std OFF", "d: original OFF")


def _ops(proto: onnx.ModelProto) -> Counter:
    return Counter(
        f"{n.op_type}" if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        for n in proto.graph.node
    )


def bench(name: str, target: str, runs: int, warmup: int) -> dict[str, float]:
    original = source_proto(name) or onnx.load(name)
    result = compile_model(name, target)
    ours_ort = emit_onnx(result.optimized, result.partition, ort=True)
    ours_std = emit_onnx(result.optimized, result.partition)
    orig_bytes = original.SerializeToString()
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "ort_extended.onnx"
        sessions = [
            one_thread_session(orig_bytes, ENABLE_EXTENDED, dump),
            one_thread_session(ours_ort, DISABLE_ALL),
            one_thread_session(ours_std, DISABLE_ALL),
            one_thread_session(orig_bytes, DISABLE_ALL),
        ]
        ort_graph = onnx.load(dump, load_external_data=False)
    feeds = random_inputs(sessions[3])
    outs = [s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()}) for s in sessions]
    ref = outs[3][0]
    errs = [float(np.abs(o[0] - ref).max()) for o in outs]
    times: list[list[float]] = [[] for _ in sessions]
    order = list(range(len(sessions)))
    for i in range(warmup + runs):
        order = order[1:] + order[:1]  # rotate: no variant always runs right after another
        for k in order:
            sess = sessions[k]
            feed = {x.name: feeds[x.name] for x in sess.get_inputs()}
            start = time.perf_counter()
            sess.run(None, feed)
            if i >= warmup:
                times[k].append(time.perf_counter() - start)
    medians = [statistics.median(t) * 1e3 for t in times]
    print(f"\n== {name} on {target}: {runs} runs after {warmup} warm-up, one thread ==")
    print(f"{'variant':24} {'median ms':>10} {'min ms':>8} {'max|err| vs d':>14}")
    for label, med, t, err in zip(VARIANTS, medians, times, errs, strict=True):
        print(f"{label:24} {med:10.2f} {min(t) * 1e3:8.2f} {err:14.2e}")
    a, b, c, d = medians
    print(
        f"ratios: a/b = {a / b:.3f} (goal >= 1)   c/b = {c / b:.3f}   d/b = {d / b:.3f}   "
        f"d/a = {d / a:.3f}"
    )
    ours, theirs = _ops(ours_ort), _ops(ort_graph)
    print(f"\n{'op type':28} {'ORT EXTENDED':>12} {'opfuse --ort':>12}")
    for op in sorted(set(ours) | set(theirs), key=lambda o: (-theirs[o], o)):
        print(f"{op:28} {theirs[op]:12d} {ours[op]:12d}")
    print(f"{'nodes':28} {sum(theirs.values()):12d} {sum(ours.values()):12d}")
    return {"a/b": a / b, "c/b": c / b, "d/b": d / b}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2", "resnet18"])
    parser.add_argument("--target", default="x86-host")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    ratios = {m: bench(m, args.target, args.runs, args.warmup) for m in args.models}
    print("\nsummary (a/b >= 1: the --ort output with ORT's optimizer off is at least as fast):")
    for model, r in ratios.items():
        verdict = (
            "ok"
            if r["a/b"] >= 1.0
            else "SLOWER (within noise below ~3%)"
            if r["a/b"] >= 0.97
            else "SLOWER"
        )
        print(f"  {model:24} a/b = {r['a/b']:.3f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
