"""Fused C of an earlier revision vs this tree's vs onnxruntime, one thread, in one run.

    python benchmarks/c_revisions.py (--base REV | --unfused) [--runs N] [--batch N]
        [--cascades] [--march ARCH] [--target NAME] MODEL ...

For each model, the fused C (layer by layer, or cascaded with ``--cascades``) is generated and built
once by the opfuse of git revision REV (``git archive`` into a temporary folder, run in a
subprocess) and once by this tree's; both libraries and an onnxruntime ORT_ENABLE_ALL session (one
intra-op thread) are then run in the same process, run by run in alternating order (the first
round dropped). Printed per model: the medians in this thread's CPU time (``time.thread_time``,
which a loaded machine's preemption does not inflate; onnxruntime with one thread computes on the
calling thread) and in wall time, the ratios to onnxruntime and REV / this tree (the speedup),
and the largest difference between the two trees' outputs (0 when a change kept the numerics).
The C is timed on ``opfuse_model_invoke()`` with the inputs written into the arena before each
round, untimed (the later calls of a round see the arena as the previous call left it; an int8
kernel's time does not depend on the values). Written for the float MatMul/Gemm
core (docs/architecture.md, "The float MatMul/Gemm core"). ``--unfused``: REV's column is this
tree's unfused C (one kernel per node) instead, so the speedup is the fusion's, in CPU time.
``--march``: both trees' C built with ``-march=ARCH`` (native by default; x86-64-v3 runs the x86
ISA module's AVX2 branches, x86-64-v2 its portable C). ``--target``: the target both trees
compile for (x86-host by default; npu-generic fuses a Conv's pool into its kernel).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

from opfuse.backends.c import emit_c
from opfuse.measure.rounds import median_times, sig4
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.sessions import one_thread_session
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model, read
from opfuse.safe_text import for_terminal

ROOT = Path(__file__).resolve().parent.parent
EMIT = ("import sys; from opfuse.backends.c import emit_c; from opfuse.measure.run.host import "
        "build_shared; from opfuse.pipeline import compile_model; "
        "emit_c(compile_model(sys.argv[1], sys.argv[5]), sys.argv[2], "
        "cascades=sys.argv[3] == '1'); "
        "build_shared(sys.argv[2], sys.argv[4].split())")


def _built(model: str, tree: Path | None, out: Path, cascades: bool, fuse: bool = True,
           march: str = "native", target: str = "x86-host") -> CModel:
    """The fused (or unfused) C of ``model`` by the opfuse in ``tree`` (None: this process's),
    built."""
    if tree is None:
        emit_c(compile_model(model, target), out, cascades=cascades, fuse=fuse)
        build_shared(out, f"-march={march}".split())
    else:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        path = Path(model).resolve() if Path(model).exists() else model  # it runs in ``tree``
        subprocess.run([sys.executable, "-c", EMIT, str(path), str(out), str(int(cascades)),
                        f"-march={march}", target], check=True, env=env, cwd=tree)
    return CModel(out)


def _times(model: str, base: Path | None, tmp: Path, runs: int, cascades: bool,
           march: str = "native", target: str = "x86-host", batch: int = 0,
           ) -> tuple[dict[str, tuple[float, float]], float, int]:
    """Median (CPU s, wall s) per call per runner (``base``, ``tree`` and ``ort``), the largest
    difference between the two trees' outputs and the calls per round."""
    feeds, _, _ = reference(model)
    sess = one_thread_session(model if Path(model).suffix != ".tflite" else read(model),
                              ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    runners, outs = {}, {}
    for key, tree in (("base", base), ("tree", None)):  # base None: this tree's unfused C
        lib = _built(model, tree, tmp / key, cascades, fuse=key == "tree" or base is not None,
                     march=march, target=target)
        outs[key] = {k: np.array(v) for k, v in lib.run(feeds).items()}  # copies of the arena
        bound = lib.bind(feeds)
        runners[key] = (lambda c=lib, b=bound: c.write(b), lib.invoke)
    runners["ort"] = (lambda: None, lambda: sess.run(None, feeds))
    med, calls = median_times(runners, runs, batch)
    diff = max(float(np.abs(outs["base"][k] - outs["tree"][k]).max()) for k in outs["base"])
    return med, diff, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="ONNX or TFLite model paths (a .tflite's "
                        "onnxruntime column runs it as the ONNX opfuse imports)")
    parser.add_argument("--base", help="the git revision to compare with")
    parser.add_argument("--unfused", action="store_true",
                        help="compare with this tree's unfused C (one kernel per node), not REV's")
    parser.add_argument("--runs", type=int, default=21, help="timed rounds per runner")
    parser.add_argument("--batch", type=int, default=0, help="calls per round (default: "
                        "chosen so that the fastest runner's round lasts ~200 us)")
    parser.add_argument("--cascades", action="store_true", help="the cascaded C of both trees")
    parser.add_argument("--march", default="native",
                        help="gcc -march= for both trees' C; more flags may follow it, e.g. \"x86-64-v3 -mavxvnni\"")
    parser.add_argument("--target", default="x86-host", help="the target both trees compile for")
    args = parser.parse_args()
    if (args.base is None) == (not args.unfused):
        parser.error("give --base REV or --unfused")
    print(f"{'model':<22}{'#calls':>7}{'REV cpu ms':>11}{'tree cpu':>10}{'ORT cpu':>10}"
          f"{'REV/ORT':>9}{'tree/ORT':>9}{'speedup':>9}{'tree wall':>11}{'ORT wall':>10}"
          f"{'wall/ORT':>9}{'max |diff|':>11}")
    with tempfile.TemporaryDirectory(prefix="opfuse-revs-") as tmp_name:
        tmp = Path(tmp_name)
        base = None if args.unfused else tmp / "base"
        if base is not None:
            base.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        for i, model in enumerate(args.models):
            (tmp / str(i)).mkdir()
            t, diff, calls = _times(model, base, tmp / str(i), args.runs, args.cascades,
                                    args.march, args.target, args.batch)
            (bc, _), (nc, nw), (oc, ow) = t["base"], t["tree"], t["ort"]
            name = for_terminal(Path(model).stem if Path(model).suffix else model)
            print(f"{name:<22}{calls:>7}{sig4(bc):>11}{sig4(nc):>10}{sig4(oc):>10}"
                  f"{bc / oc:>8.3f}x{nc / oc:>8.3f}x{bc / nc:>8.3f}x{sig4(nw):>11}{sig4(ow):>10}"
                  f"{nw / ow:>8.3f}x{diff:>11.3g}", flush=True)
    print(f"-march={args.march}; medians of {args.runs} rounds each of #calls back-to-back calls, "
          "ms per call, one thread, alternating order; cpu: this thread's CPU time; "
          "speedup = REV / tree (cpu)")


if __name__ == "__main__":
    main()
