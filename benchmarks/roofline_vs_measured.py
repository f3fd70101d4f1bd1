"""The cost model against measurement: predicted vs measured time per kernel on this machine.

For resnet18 and mobilenet_v2, before fusion (the model as imported, one node per kernel) and after
(the fused partition on the calibrated ``host`` target), every kernel is cut into its own ONNX model:
inputs = the kernel's external activation inputs, initializers = its weights, outputs = the values it
writes. Each runs in onnxruntime with one thread; the time is the median of repeated session.run
calls (so it includes the per-call overhead that ``opfuse calibrate`` measured as dispatch overhead).
Before-fusion kernels run with ORT_DISABLE_ALL (op by op, as opfuse counts them); fused kernels run
with ORT_ENABLE_EXTENDED, so ORT's own Conv+activation fusions (FusedConv) make them one kernel.

Predictions: ``opfuse.analysis.analyze`` at the model's precision (fp32) on the ``host`` target
(``opfuse calibrate``; if none is installed, this script calibrates into a temporary file). A host
target written before ``[perf.efficiency]`` existed runs every class at the GEMM peak: re-calibrate.
At the end, the errors per kernel class (``opfuse.cost.kclass``: the anchor's, else the first op's).

    python benchmarks/roofline_vs_measured.py [--models resnet18 mobilenet_v2] [--top 20] [--runs 3]

With ``--runs N`` (default 3) the whole thing (calibrate into a fresh temporary target, predict,
measure) runs N times and the figure to quote is the median of the N per-run medians with their
range: one run on a shared machine can be off by 20 points. ``--runs 1 --installed`` uses the
installed ``host`` target once, as before.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import onnx
import onnx_ir as ir
from onnx import helper

from opfuse.analysis import analyze
from opfuse.cost import KernelCost
from opfuse.cost.calibrate import write_host_target
from opfuse.errors import OpfuseError
from opfuse.fusion.types import Kernel, Partition
from opfuse.pipeline import compile_model
from opfuse.runtime import DISABLE_ALL, ENABLE_EXTENDED, median_run_s, one_thread_session
from opfuse.targets import Target, load_target


def fresh_target() -> Target:
    """Calibrate into a temporary file and load it; the calibration's warnings are printed."""
    from opfuse.cost.calibrate import calibrate

    figures = calibrate()
    for line in figures.get("warnings", []):
        print(f"warning: {line}")
    path = Path(tempfile.mkdtemp()) / "host.toml"
    return load_target(write_host_target(path, figures))


def host_target() -> Target:
    try:
        return load_target("host")
    except OpfuseError:
        path = Path(tempfile.mkdtemp()) / "host.toml"
        print(f"no calibrated 'host' target installed: calibrating into {path} ...")
        return load_target(write_host_target(path))


def _info(value: ir.Value) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(
        value.name, int(value.dtype), [int(d) for d in value.shape]
    )


def kernel_models(model: ir.Model, partition: Partition) -> list[onnx.ModelProto]:
    """One ONNX model per kernel (see the module docstring)."""
    proto = ir.to_proto(model)
    nodes = {n.name: n for n in proto.graph.node}
    inits = {t.name: t for t in proto.graph.initializer}
    values = {v.name: v for v in model.graph.inputs}
    for node in model.graph:
        values.update({o.name: o for o in node.outputs if o is not None})
    cut = []
    for kernel in partition.kernels:
        graph = helper.make_graph(
            [nodes[n] for n in kernel.nodes],
            kernel.name,
            [_info(values[n]) for n in kernel.inputs if n not in inits],
            [_info(values[n]) for n in kernel.outputs],
            [inits[n] for n in kernel.inputs if n in inits],
        )
        sub = helper.make_model(graph, opset_imports=list(proto.opset_import))
        sub.ir_version = proto.ir_version
        cut.append(sub)
    return cut


def measure(sub: onnx.ModelProto, fused: bool, budget_s: float, seed: int) -> float:
    sess = one_thread_session(sub, ENABLE_EXTENDED if fused else DISABLE_ALL)
    return median_run_s(sess, budget_s, seed=seed, warmup=2, min_runs=5, max_runs=200)


def compare(
    label: str, model: ir.Model, partition: Partition, costs: tuple[KernelCost, ...], fused: bool,
    budget_s: float, top: int,
) -> list[tuple[str, float]]:  # fmt: skip
    rows: list[tuple[Kernel, KernelCost, float]] = []
    for seed, (kernel, cost, sub) in enumerate(
        zip(partition.kernels, costs, kernel_models(model, partition), strict=True)
    ):
        rows.append((kernel, cost, measure(sub, fused, budget_s, seed)))
    errors = [abs(c.latency_s - t) / t for _, c, t in rows]
    predicted = sum(c.latency_s for _, c, _ in rows)
    measured = sum(t for _, _, t in rows)
    print(f"\n{label}: {len(rows)} kernels; top {top} by measured time")
    print(
        f"  {'kernel':<30}{'ops':<22}{'class':<12}{'bound':<8}{'pred us':>10}{'meas us':>10}{'err':>8}"
    )
    for kernel, cost, t in sorted(rows, key=lambda r: -r[2])[:top]:
        ops = "+".join(kernel.ops)
        err = (cost.latency_s - t) / t
        print(
            f"  {kernel.name[:29]:<30}{ops[:21]:<22}{cost.kernel_class:<12}{cost.bound:<8}"
            f"{cost.latency_s * 1e6:>10.1f}{t * 1e6:>10.1f}{err:>+8.0%}"
        )
    print(
        f"  total: predicted {predicted * 1e3:.3f} ms, measured {measured * 1e3:.3f} ms "
        f"({(predicted - measured) / measured:+.0%}); median |relative error| per kernel "
        f"{statistics.median(errors):.0%}"
    )
    return [(c.kernel_class, (c.latency_s - t) / t) for _, c, t in rows]


def print_classes(signed: list[tuple[str, float]]) -> None:
    """Median |relative error| and median signed error (- = predicted too fast) per class."""
    print(f"\n  {'class':<12}{'kernels':>8}{'median |err|':>14}{'median err':>12}")
    for klass in sorted({c for c, _ in signed}):
        errs = [e for c, e in signed if c == klass]
        print(
            f"  {klass:<12}{len(errs):>8}{statistics.median(abs(e) for e in errs):>14.0%}"
            f"{statistics.median(errs):>+12.0%}"
        )


def one_pass(target: Target, args: argparse.Namespace) -> float:
    """Predict and measure every kernel once on ``target``; the median |relative error|."""
    perf = target.perf
    assert perf is not None
    if not perf.efficiency:
        print("warning: this host target has no [perf.efficiency]; run `opfuse calibrate` again")
    print(
        f"target {target.name}: fp32 {perf.peak_macs_per_s['fp32'] / 1e9:.1f} GMAC/s, "
        f"dispatch {perf.dispatch_overhead_s * 1e6:.1f} us, levels "
        + ", ".join(f"{m.name} {m.read_bytes_per_s / 1e9:.0f} GB/s" for m in perf.memory)
        + "; efficiency "
        + (", ".join(f"{k} {v:.3g}" for k, v in perf.efficiency.items()) or "none (1.0)")
    )
    started = time.perf_counter()
    everything: list[tuple[str, float]] = []
    for name in args.models:
        result = compile_model(name, target)
        analysis = analyze(result)
        everything += compare(
            f"{name} before fusion (ORT_DISABLE_ALL)", result.original, result.before,
            analysis.before.cost.kernels, False, args.budget, args.top,
        )  # fmt: skip
        everything += compare(
            f"{name} after fusion (ORT_ENABLE_EXTENDED)", result.optimized, result.partition,
            analysis.after.cost.kernels, True, args.budget, args.top,
        )  # fmt: skip
    median = statistics.median(abs(e) for _, e in everything)
    print(
        f"\nall {len(everything)} kernels: median |relative error| {median:.0%} "
        f"({time.perf_counter() - started:.0f} s); per kernel class:"
    )
    print_classes(everything)
    return median


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--budget", type=float, default=0.12, help="seconds of repeats per kernel")
    parser.add_argument("--runs", type=int, default=3, help="calibrate + predict + measure N times")
    parser.add_argument("--installed", action="store_true",
                        help="use the installed host target instead of calibrating each run")
    args = parser.parse_args(argv)
    medians = []
    for run in range(args.runs):
        print(f"\n=== run {run + 1} of {args.runs} ===")
        target = host_target() if args.installed else fresh_target()
        medians.append(one_pass(target, args))
    print(
        f"\nmedian |relative error| over {args.runs} runs: median of medians "
        f"{statistics.median(medians):.0%}, range {min(medians):.0%}-{max(medians):.0%} "
        f"({(max(medians) - min(medians)) * 100:.0f} points); per run: "
        + ", ".join(f"{m:.0%}" for m in medians)
    )


if __name__ == "__main__":
    main()
