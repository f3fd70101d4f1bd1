"""Measured vs predicted memory traffic of fused and unfused generated C, under cachegrind.

    python benchmarks/traffic_measured.py [MODEL ...]      (default: seed_block seed_pipeline)

Builds the fused and the unfused C of each model (the same canonicalized model; unfused = one
kernel per node, every intermediate stored) with gcc -O3 (no -march: valgrind has no AVX-512),
runs the harness under ``valgrind --tool=cachegrind --cache-sim=yes`` with a simulated 32 KB L1d
and a 256 KB last-level cache (an edge SoC's L2; on the host's large L3 these working sets would
stay on chip), once with 1 and once with 3 inferences; the difference / 2 is one inference,
without process start-up and file I/O. Last-level data traffic = (LLd read + write misses) x 64 B.

What is measured is ``opfuse_model_invoke()`` alone, the zero-copy API: the harness runs with
OPFUSE_DEMO_INPUTS_ONCE=1, so it writes the input into the arena (``opfuse_model_input``) once,
before the first inference, and each further inference is one invoke with no copy in or out
(the copying ``opfuse_model_run`` would add a pass over the input and output that the cost model
does not count and a deployed application does not need). This is exact, not a subtraction: the
kernels' addresses and trip counts do not depend on the data, so an invoke over whatever values
the previous one left in the input's bytes (the planner may reuse them in place) moves the same
lines; and the input is as cold as in steady state, since a whole inference ran in between. A
copy-only baseline was not subtracted because the copy and the first kernel share cache lines,
which would make the difference depend on the order. Outputs of these runs are not checked (the
tests do that).

Cachegrind counts misses, not write-backs: a store to a line already in the cache is free in
this count, though the dirty line is written to memory later. So an in-place elementwise kernel
(the unfused ReLU/Clip reading and rewriting its input) shows its read but not its write, while
the cost model counts both; the unfused figure is low by about the size of such in-place outputs,
which understates the measured reduction. The (rd + wr) column splits read and write misses.

The prediction is the cost model's (opfuse.cost.cost_model, fp32, activations + weights) on the
same two schedules, and, for reference, opfuse.analysis's before (model as imported) -> after.

Then a cascaded inverted-residual block (``--block-only`` for it alone, ``--no-block`` without it):
MobileNetV2's expand 1x1 -> ReLU6 -> depthwise 3x3 -> ReLU6 -> project 1x1 + residual add at
1x24x56x56 with expansion 6, built with onnx.helper, compiled for x86-host (whose partition puts the
whole block, add included, in one cascade), and emitted three ways: unfused (one kernel per node),
fused layer by layer (``emit_c`` default: the cascade split into its members) and cascaded
(the default ``--emit c``: rows streamed through ring buffers). Each is predicted by the cost model on the
partition it runs, where a cascade's intermediates, its ring buffers, cost nothing.

What the simulated cache sizes mean for a cascade: the block's input and output are 294 KiB each
and every expanded intermediate 1.7 MiB, all larger than the 256 KB last level, so layer by layer
each intermediate is written to memory and read back. The cascade's rings (3 rows of the expanded
tensor for the depthwise window, 1 row of the depthwise output: 94.5 + 31.5 KiB) and the block's
weights (33 KiB) fit the last level together, so what streams through memory is the input once
and the output once, as the cost model says. The rings do not fit the 32 KB L1d: each row is
reused through the last level, which is where the model's "intermediates cost nothing" holds (a
last level smaller than the rings plus weights would make their traffic reappear; an L1 as large
as them would also cut the L1 misses). The residual read of the input hits the lines the expand
conv read a band earlier, so the input is not read twice either.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

from opfuse.backends.c import emit_c
from opfuse.backends.c.emit import c_schedule
from opfuse.backends.c.manifest import Manifest
from opfuse.measure.run.host import build_executable, manifest, run_executable
from opfuse.measure.validate.c_float import reference
from opfuse.memory.lifetimes import ring_bytes
from opfuse.pipeline import compile_model

LINE = 64
CACHE = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=262144,16,64"]


def _misses(stderr: str) -> dict[str, int]:
    def num(label: str) -> tuple[int, int]:
        m = re.search(rf"{label}:\s+([\d,]+)\s+\(\s*([\d,]+) rd\s+\+\s+([\d,]+) wr\)", stderr)
        if m is None:
            raise RuntimeError(f"no '{label}' line in cachegrind's output:\n{stderr[-2000:]}")
        return int(m.group(2).replace(",", "")), int(m.group(3).replace(",", ""))

    d1r, d1w = num("D1  misses")
    llr, llw = num("LLd misses")
    return {"d1": d1r + d1w, "ll": llr + llw, "llr": llr, "llw": llw}


def measure(exe: Path, info: Manifest, feeds: dict) -> dict[str, int]:
    runs = []
    for repeats in (1, 3):
        _, proc = run_executable(
            exe, info, feeds, repeats=repeats, env={"OPFUSE_DEMO_INPUTS_ONCE": "1"},
            prefix=["valgrind", "--tool=cachegrind", "--cache-sim=yes", *CACHE,
                    "--cachegrind-out-file=/dev/null"])
        runs.append(_misses(proc.stderr))
    return {k: (runs[1][k] - runs[0][k]) // 2 for k in runs[0]}


def predicted(result, fuse: bool, cascades: bool = False) -> int:
    from opfuse.cost import cost_model

    sched = c_schedule(result, fuse, cascades)
    model, part = sched.model, sched.partition
    return cost_model(model, part, result.target, "fp32").traffic_bytes


def analysis_pair(result) -> tuple[int, int] | None:
    try:
        from opfuse.analysis import analyze
    except ImportError:
        return None
    a = analyze(result, precision="fp32")
    return a.before.cost.traffic_bytes, a.after.cost.traffic_bytes


def inverted_residual(size: int = 56, channels: int = 24, expand: int = 6, seed: int = 0):
    """MobileNetV2's stride-1 block with its residual add, weights scaled to keep values O(1)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    wide = channels * expand

    def init(name: str, shape: tuple[int, ...], fan_in: int):
        data = rng.standard_normal(shape) / np.sqrt(fan_in)
        return numpy_helper.from_array(data.astype(np.float32), name)

    inits = [init("w_expand", (wide, channels, 1, 1), channels), init("b_expand", (wide,), 1),
             init("w_dw", (wide, 1, 3, 3), 9), init("b_dw", (wide,), 1),
             init("w_project", (channels, wide, 1, 1), wide), init("b_project", (channels,), 1),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w_expand", "b_expand"], ["e"], name="expand", kernel_shape=[1, 1]),
        node("Clip", ["e", "lo", "hi"], ["e6"], name="expand_relu6"),
        node("Conv", ["e6", "w_dw", "b_dw"], ["d"], name="depthwise", kernel_shape=[3, 3],
             pads=[1, 1, 1, 1], group=wide),
        node("Clip", ["d", "lo", "hi"], ["d6"], name="depthwise_relu6"),
        node("Conv", ["d6", "w_project", "b_project"], ["p"], name="project", kernel_shape=[1, 1]),
        node("Add", ["p", "x"], ["y"], name="residual"),
    ]
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "inverted_residual",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              initializer=inits)  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


BLOCK_VARIANTS = (("unfused", False, False), ("fused", True, False), ("cascaded", True, True))


def block_traffic(target: str = "x86-host") -> None:
    """The cascaded inverted-residual block of the module docstring, three ways."""
    import onnx

    with tempfile.TemporaryDirectory(prefix="opfuse-cg-block-") as tmp:
        source = Path(tmp) / "inverted_residual.onnx"
        onnx.save(inverted_residual(), source)
        result = compile_model(str(source), target)
        cascades = result.partition.cascades
        if len(cascades) != 1 or len(result.partition.kernels) != 1:
            sys.exit(f"the block is not one cascade on {target}: {result.partition.kernels}")
        values = {o.name: o for n in result.optimized.graph for o in n.outputs}
        rings = sum(ring_bytes(r, values[r.value], 4) for r in cascades[0].ring_buffers)
        print(f"\ninverted-residual block 1x24x56x56, expansion 6, on {target}: one cascade "
              f"{' + '.join(cascades[0].ops)}, rings "
              + ", ".join(f"{r.value} {r.rows} rows" for r in cascades[0].ring_buffers)
              + f" ({rings / 1024:.0f} KiB at fp32)")
        feeds, _, _ = reference(str(source))
        head = (f"{'variant':<10}{'kernels':>8}{'arena KB':>10}{'LL data KB':>12}{'(rd + wr)':>16}"
                f"{'D1 miss KB':>12}{'predicted KB':>14}{'measured/pred':>15}")
        print(head)
        print("-" * len(head))
        got = {}
        for label, fuse, streamed in BLOCK_VARIANTS:
            folder = Path(tmp) / label
            emitted = emit_c(result, folder, fuse=fuse, cascades=streamed)
            if streamed and len(emitted.cascades) != 1:
                sys.exit(f"the C streamed {len(emitted.cascades)} cascades, not the block's one")
            exe = build_executable(folder, ["-O3", "-ffp-contract=fast"])
            m = measure(exe, manifest(folder), feeds)
            pred = predicted(result, fuse, streamed)
            got[label] = (m["ll"] * LINE, pred)
            split = f"{m['llr'] * LINE // 1024} + {m['llw'] * LINE // 1024}"
            print(f"{label:<10}{emitted.kernels:>8}{emitted.arena_bytes / 1024:>10.0f}"
                  f"{m['ll'] * LINE / 1024:>12.0f}{split:>16}{m['d1'] * LINE / 1024:>12.0f}"
                  f"{pred / 1024:>14.0f}{m['ll'] * LINE / pred:>15.2f}", flush=True)
        cm, cp = got["cascaded"]
        for label in ("unfused", "fused"):
            m, p = got[label]
            print(f"  cascaded vs {label}: last-level traffic {m / cm:.1f}x less measured, "
                  f"{p / cp:.1f}x less predicted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["seed_block", "seed_pipeline"])
    parser.add_argument("--no-block", action="store_true",
                        help="skip the cascaded inverted-residual block")
    parser.add_argument("--block-only", action="store_true",
                        help="only the cascaded inverted-residual block")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind not found: apt-get install -y valgrind")
    if args.block_only:
        block_traffic()
        return
    head = (f"{'model':<15}{'variant':<9}{'kernels':>8}{'LL data KB':>12}{'(rd + wr)':>16}"
            f"{'D1 miss KB':>12}{'predicted KB':>14}")
    print(head)
    print("-" * len(head))
    for name in args.models:
        result = compile_model(name)
        feeds, _, _ = reference(name)
        got = {}
        with tempfile.TemporaryDirectory(prefix="opfuse-cg-") as tmp:
            for fuse in (False, True):
                folder = Path(tmp) / ("fused" if fuse else "unfused")
                emitted = emit_c(result, folder, fuse=fuse, cascades=False)
                exe = build_executable(folder, ["-O3", "-ffp-contract=fast"])
                m = measure(exe, manifest(folder), feeds)
                pred = predicted(result, fuse)
                got[fuse] = (m, pred)
                split = f"{m['llr'] * LINE // 1024} + {m['llw'] * LINE // 1024}"
                print(f"{name:<15}{'fused' if fuse else 'unfused':<9}{emitted.kernels:>8}"
                      f"{m['ll'] * LINE / 1024:>12.0f}{split:>16}"
                      f"{m['d1'] * LINE / 1024:>12.0f}"
                      f"{pred / 1024:>14.0f}", flush=True)
        (mu, pu), (mf, pf) = got[False], got[True]
        measured = 1 - mf["ll"] / mu["ll"] if mu["ll"] else 0.0
        d1 = 1 - mf["d1"] / mu["d1"] if mu["d1"] else 0.0
        print(f"  {name}: last-level data traffic reduction measured {measured:.1%} "
              f"(L1 misses {d1:.1%}), predicted {1 - pf / pu:.1%} (cost model, same schedules)")
        pair = analysis_pair(result)
        if pair is not None:
            print(f"  {name}: opfuse analyze before -> after (model as imported -> fused): "
                  f"{pair[0] / 1024:.0f} KB -> {pair[1] / 1024:.0f} KB, "
                  f"{1 - pair[1] / pair[0]:.1%} less")
    if not args.no_block:
        block_traffic()


if __name__ == "__main__":
    main()
