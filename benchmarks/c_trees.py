"""The same model's generated C from two opfuse source trees, timed side by side in one run.

    python benchmarks/c_trees.py --base DIR [--repeats N] [--blocks B] [--no-cascades] [MODEL ...]

``--base DIR`` is another checkout of opfuse (e.g. ``git archive <commit> | tar -x -C DIR``); this
tree is the one this script imports opfuse from. Each tree writes the model's C (``emit_c``, cascades unless
``--no-cascades``) in a subprocess; both builds are then timed in the same alternating blocks as
``benchmarks/c_backend.py`` (opfuse.measure.sessions.block_timings: medians of block medians, one
thread) and their outputs compared: a change to the kernels shows as a ratio measured in one
run, not as two runs on a shared machine minutes apart.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import opfuse
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.sessions import block_timings
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import DEFAULT_TARGET, compile_model

EMIT = ("import sys; from opfuse.backends.c.emit import emit_c; "
        "from opfuse.pipeline import compile_model; "
        "emit_c(compile_model(sys.argv[1], sys.argv[3]), sys.argv[2], cascades=sys.argv[4] == '1')")


def _emit(tree: str, model: str, folder: Path, target: str, cascades: bool) -> None:
    env = {**os.environ, "PYTHONPATH": tree}
    subprocess.run([sys.executable, "-c", EMIT, model, str(folder), target, str(int(cascades))],
                   check=True, env=env, cwd=tree, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["mobilenet_v2"])
    parser.add_argument("--base", required=True, help="the other opfuse source tree")
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--no-cascades", action="store_true")
    args = parser.parse_args()
    this = Path(opfuse.__file__).resolve().parents[1]
    trees = {"base": str(Path(args.base).resolve()), "this": str(this)}
    print(f"{'model':<14}{'base ms':>10}{'this ms':>10}{'this/base':>11}{'max |diff|':>12}")
    for name in args.models:
        feeds, _, _ = reference(compile_model(name, args.target).source)
        runners, before, outs = {}, {}, {}
        with tempfile.TemporaryDirectory(prefix="opfuse-trees-") as tmp:
            for key, tree in trees.items():
                folder = Path(tmp) / key
                _emit(tree, name, folder, args.target, not args.no_cascades)
                model = CModel(build_shared(folder))
                bound = model.bind(feeds)
                outs[key] = model.run(feeds)
                before[key] = (lambda m=model, b=bound: m.write(b))
                runners[key] = model.invoke
            t = block_timings(runners, args.blocks, max(2, args.repeats // args.blocks), before)
        diff = max(float(np.abs(outs["base"][k] - outs["this"][k]).max()) for k in outs["base"])
        base, this = t["base"].median_s, t["this"].median_s
        print(f"{name:<14}{base * 1e3:>10.3f}{this * 1e3:>10.3f}{this / base:>10.3f}x{diff:>12.3g}",
              flush=True)


if __name__ == "__main__":
    main()
