"""Compile and analyze time against graph size, beside onnxruntime's session creation.

Graphs are repeated residual blocks (Conv -> BatchNormalization -> Relu -> Conv -> BN -> Add ->
Relu) on a small 1x8x8x8 tensor, so the time measured is per-node work, not arithmetic.
compile = import + canonicalize + partition + emit ONNX. analyze = ``opfuse.analyze`` on the compiled
result (re-import of the original, op-by-op and fused cost models, both arena plans), what
``opfuse analyze`` adds after compiling. ORT time = InferenceSession creation at ORT_ENABLE_EXTENDED
(its graph optimizer does the comparable rewrites). Median of repeated runs. The growth columns are
the time ratio to the previous size divided by the node ratio (1.0 = linear). "cpu" columns are
process CPU seconds, which a loaded machine does not inflate.

``--graph chain`` is instead one long chain of in-place elementwise ops (Relu, Sigmoid, Neg) on a
1x8x8x8 tensor: every output may overwrite its input, so the arena planner's alias chains are as
long as the graph (the case that was quadratic before path compression, docs/architecture.md,
"Outputs and limits"). Onnxruntime at 100k+ nodes takes many minutes: pass --no-ort there.

    python benchmarks/compile_scaling.py [--sizes 1000 10000 100000] [--repeat 3] [--no-ort]
    python benchmarks/compile_scaling.py --graph chain --sizes 10000 50000 100000 200000 \
        --repeat 1 --no-ort
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import opfuse
from opfuse.analysis import analyze
from opfuse.measure.sessions import ENABLE_EXTENDED, one_thread_session

NODES_PER_BLOCK = 7
C = 8


def residual_graph(n_nodes: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"
    for b in range(max(1, n_nodes // NODES_PER_BLOCK)):
        p = f"b{b}_"

        def conv_bn(inp: str, tag: str, p: str = p) -> str:
            w = numpy_helper.from_array(
                (rng.standard_normal((C, C, 3, 3)) * 0.15).astype(np.float32), p + tag + "_w"
            )
            stats = [
                numpy_helper.from_array(arr.astype(np.float32), p + tag + name)
                for name, arr in (
                    ("_g", rng.uniform(0.5, 1.5, C)),
                    ("_b", rng.normal(0, 0.1, C)),
                    ("_m", rng.normal(0, 0.1, C)),
                    ("_v", rng.uniform(0.5, 1.5, C)),
                )
            ]
            inits.extend([w, *stats])
            nodes.append(
                helper.make_node("Conv", [inp, w.name], [p + tag + "_c"], name=p + tag + "_conv", pads=[1] * 4)
            )
            nodes.append(
                helper.make_node(
                    "BatchNormalization",
                    [p + tag + "_c", *(s.name for s in stats)],
                    [p + tag + "_bn"],
                    name=p + tag + "_bn",
                )
            )
            return p + tag + "_bn"

        a = conv_bn(x, "a")
        nodes.append(helper.make_node("Relu", [a], [p + "r1"], name=p + "relu1"))
        c = conv_bn(p + "r1", "b")
        nodes.append(helper.make_node("Add", [c, x], [p + "sum"], name=p + "add"))
        nodes.append(helper.make_node("Relu", [p + "sum"], [p + "out"], name=p + "relu2"))
        x = p + "out"
    graph = helper.make_graph(
        nodes,
        "residual_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, C, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def chain_graph(n_nodes: int) -> onnx.ModelProto:
    """``n_nodes`` unary elementwise ops in one line: each may run in place over the last."""
    nodes, x = [], "x"
    for i in range(n_nodes):
        op = ("Relu", "Sigmoid", "Neg")[i % 3]
        nodes.append(helper.make_node(op, [x], [f"t{i}"], name=f"n{i}"))
        x = f"t{i}"
    graph = helper.make_graph(
        nodes,
        "elementwise_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, C, 8, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _median_time(fn, repeat: int) -> float:
    return _median_times(fn, repeat)[0]


def _median_times(fn, repeat: int) -> tuple[float, float]:
    """Median wall-clock and process CPU seconds (CPU time is what a shared machine's load does
    not inflate; on an idle machine the two agree)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", default="x86-host")
    ap.add_argument("--no-ort", action="store_true", help="skip onnxruntime's session creation")
    ap.add_argument("--graph", choices=("residual", "chain"), default="residual",
                    help="residual blocks, or one in-place elementwise chain")
    args = ap.parse_args()
    build = residual_graph if args.graph == "residual" else chain_graph
    print(f"graph: {args.graph}, target {args.target}, median of {args.repeat}")
    print(
        f"{'nodes':>7} {'compile s':>9} {'cpu s':>7} {'us/node':>8} {'growth':>6} "
        f"{'analyze s':>9} {'cpu s':>7} {'us/node':>8} {'growth':>6} {'ORT ext s':>9} "
        f"{'compile/ORT':>11}"
    )
    prev: tuple[int, float, float] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            proto = build(size)
            path = Path(tmp) / f"g{size}.onnx"
            onnx.save(proto, path)
            n = len(proto.graph.node)
            compiled = []

            def run_compile(path: Path = path, compiled: list = compiled) -> None:
                result = opfuse.compile(path, target=args.target)
                opfuse.emit(result)
                compiled.append(result)

            def run_analyze(compiled: list = compiled) -> None:
                analyze(compiled.pop())

            def run_ort(data: bytes = proto.SerializeToString()) -> None:
                one_thread_session(data, ENABLE_EXTENDED)

            t_compile, cpu_compile = _median_times(run_compile, args.repeat)
            # each on a fresh compile result
            t_analyze, cpu_analyze = _median_times(run_analyze, args.repeat)
            t_ort = float("nan") if args.no_ort else _median_time(run_ort, args.repeat)
            growth_c = growth_a = "     -"
            if prev is not None:
                scale = n / prev[0]
                growth_c = f"{t_compile / prev[1] / scale:>6.2f}"
                growth_a = f"{t_analyze / prev[2] / scale:>6.2f}"
            print(
                f"{n:>7} {t_compile:>9.3f} {cpu_compile:>7.2f} {t_compile / n * 1e6:>8.1f} "
                f"{growth_c} {t_analyze:>9.3f} {cpu_analyze:>7.2f} {t_analyze / n * 1e6:>8.1f} "
                f"{growth_a} {t_ort:>9.3f} "
                f"{t_compile / t_ort:>11.2f}",
                flush=True,
            )
            prev = (n, t_compile, t_analyze)


if __name__ == "__main__":
    main()
