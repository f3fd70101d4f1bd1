"""The cost model against measurement: predicted vs measured time per kernel on this machine.

Float (onnxruntime). For resnet18 and mobilenet_v2, before fusion (the model as imported, one node per kernel) and after
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

int8 (opfuse's generated C). For every int8 ``.tflite`` of ``../shared/models/tflite``: compile
for the ``host`` target, emit the fused C (``compile --emit c``), time every kernel as it runs in
the full invoke (``opfuse.measure.run.kernel_times``: profile marks, warm, median of repeats) and cost the very
partition the C follows (``c_schedule``, the C's planned arena) at the model's precision (int8):
on a host calibrated with ``[perf.int8c]`` that is the int8 C model of ``opfuse.cost.int8c``. A
view kernel (a Reshape the memory plan puts on its input: no code) and any kernel measured under
``FLOOR_S`` (where the timer's ~20 ns cost and its jitter dominate) are listed, not counted.

    python benchmarks/roofline_vs_measured.py [--models resnet18 mobilenet_v2] [--top 20] [--runs 3]
        [--int8-models kws_ref_model ...] [--only float|int8]

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
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_ir as ir
from onnx import helper

from opfuse.analysis import analyze
from opfuse.cost import KernelCost, cost_model
from opfuse.errors import OpfuseError
from opfuse.measure.calibrate.host import write_host_target
from opfuse.measure.sessions import DISABLE_ALL, ENABLE_EXTENDED, median_run_s, one_thread_session
from opfuse.pipeline import compile_model
from opfuse.schedule import Kernel, Partition
from opfuse.targets import Target, load_target


def fresh_target() -> Target:
    """Calibrate into a temporary file and load it; the calibration's warnings are printed."""
    from opfuse.measure.calibrate.host import calibrate

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
    """Predict and measure every float kernel once on ``target``; the median |relative error|."""
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
        f"\nfloat, all {len(everything)} kernels: median |relative error| {median:.0%} "
        f"({time.perf_counter() - started:.0f} s); per kernel class:"
    )
    print_classes(everything)
    return median


FLOOR_S = 0.2e-6
SHARED_TFLITE = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tflite"
INT8_MODELS = ("kws_ref_model", "vww_96_int8", "person_detect", "mcunet_vww",
               "pretrainedResnet_quant", "ad01_int8", "hello_world_int8")


@dataclass(frozen=True)
class Row:
    model: str
    kernel: str
    ops: str
    klass: str
    view: bool
    predicted_s: float
    measured_s: float
    path: str = ""  # the C template path of its first work item (opfuse.cost.cwork)

    @property
    def counted(self) -> bool:
        return not self.view and self.measured_s >= FLOOR_S

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


def int8_rows(path: Path, target: Target, budget_s: float) -> list[Row]:
    """Predicted and measured time of every kernel of ``path``'s int8 C on ``target``."""
    from opfuse.backends.c.emit import c_schedule, emit_c
    from opfuse.cost.cwork import is_view, kernel_work
    from opfuse.cost.int8c import runs_dw, runs_gemv
    from opfuse.measure.run.host import manifest
    from opfuse.measure.run.kernel_times import time_kernels
    from opfuse.measure.validate.per_kernel import random_feeds

    result = compile_model(path, target)
    sched = c_schedule(result, cascades=False)
    model, part = sched.model, sched.partition
    with tempfile.TemporaryDirectory(prefix="opfuse-int8-") as tmp:
        emitted = emit_c(result, Path(tmp), cascades=False)
        info = manifest(Path(tmp))
        times = time_kernels(tmp, random_feeds(info), budget_s=budget_s)
    entries = sorted(info.kernel_outputs, key=lambda k: k.index)
    cost = cost_model(model, part, target, arena_bytes=emitted.arena_bytes)
    nodes = {n.name: n for n in model.graph}
    gemv, dw = runs_gemv(model, target), runs_dw(model, target)
    rows = []
    for entry, kc, kernel, t in zip(entries, cost.kernels, part.kernels, times.seconds,
                                    strict=True):
        if entry.nodes != tuple(kernel.nodes):
            raise OpfuseError(f"{path.name}: the C's kernel {entry.index} is not the costed one")
        members = [nodes[n] for n in kernel.nodes if n in nodes]
        works = kernel_work(members, gemv, dw)
        rows.append(Row(path.stem, entry.function, "+".join(kc.ops), kc.kernel_class,
                        is_view(members), kc.latency_s, t, works[0].path if works else "-"))
    return rows


def print_int8(rows: list[Row], top: int) -> None:
    counted = [r for r in rows if r.counted]
    print(f"\n{rows[0].model} (int8 C): {len(rows)} kernels, {len(counted)} counted (not views, "
          f"measured >= {FLOOR_S * 1e6:.1f} us); top {top} by measured time")
    print(f"  {'kernel':<30}{'ops':<24}{'path':<12}{'pred us':>10}{'meas us':>10}{'err':>8}")
    for r in sorted(rows, key=lambda r: -r.measured_s)[:top]:
        err = f"{r.error:>+8.0%}" if r.counted else f"{'view' if r.view else '<floor':>8}"
        print(f"  {r.kernel[:29]:<30}{r.ops[:23]:<24}{r.path:<12}"
              f"{r.predicted_s * 1e6:>10.2f}{r.measured_s * 1e6:>10.2f}{err}")
    if counted:
        pred = sum(r.predicted_s for r in counted)
        meas = sum(r.measured_s for r in counted)
        print(f"  total: predicted {pred * 1e3:.3f} ms, measured {meas * 1e3:.3f} ms "
              f"({(pred - meas) / meas:+.0%}); median |relative error| per kernel "
              f"{statistics.median(abs(r.error) for r in counted):.0%}")


def int8_pass(target: Target, args: argparse.Namespace) -> float | None:
    """Predict and measure every int8 C kernel once on ``target``; the median |relative error|."""
    perf = target.perf
    assert perf is not None
    if perf.int8c is None:
        print("warning: this host target has no [perf.int8c] (calibrated before it existed): int8 "
              "kernels are priced as onnxruntime's; run `opfuse calibrate` again")
    paths = [SHARED_TFLITE / f"{n}.tflite" for n in args.int8_models]
    paths = [p for p in paths if p.exists()]
    if not paths:
        print(f"\nint8: no model found under {SHARED_TFLITE}; skipped")
        return None
    started = time.perf_counter()
    counted: list[Row] = []
    every: list[Row] = []
    for path in paths:
        rows = int8_rows(path, target, args.int8_budget)
        print_int8(rows, args.top)
        counted += [r for r in rows if r.counted]
        every += rows
    median = statistics.median(abs(r.error) for r in counted)
    print(f"\nint8 C, all {len(counted)} counted kernels of {len(paths)} models: median |relative "
          f"error| {median:.0%} ({time.perf_counter() - started:.0f} s); per model:")
    for model in dict.fromkeys(r.model for r in counted):
        errs = [abs(r.error) for r in counted if r.model == model]
        print(f"  {model:<24}{len(errs):>8}{statistics.median(errs):>14.0%}")
    print("  per kernel class:")
    print_classes([(r.klass, r.error) for r in counted])
    print("  per C path ([perf.int8c]'s keys):")
    print_classes([(r.path, r.error) for r in counted])
    small = [r for r in every if not r.view and not r.counted and r.measured_s > 0]
    if small:  # batch-1 GEMVs mostly: shown, not counted (the timer's cost is their size)
        print(f"  under the floor ({len(small)} kernels), per C path:")
        print_classes([(r.path, r.error) for r in small])
    return median


def _summary(label: str, medians: list[float]) -> None:
    print(
        f"{label} median |relative error| over {len(medians)} runs: median of medians "
        f"{statistics.median(medians):.0%}, range {min(medians):.0%}-{max(medians):.0%} "
        f"({(max(medians) - min(medians)) * 100:.0f} points); per run: "
        + ", ".join(f"{m:.0%}" for m in medians)
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--int8-models", nargs="+", default=list(INT8_MODELS),
                        help=f"int8 .tflite names under {SHARED_TFLITE}")
    parser.add_argument("--only", choices=("float", "int8"), help="one half only")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--budget", type=float, default=0.12, help="seconds of repeats per kernel")
    parser.add_argument("--int8-budget", type=float, default=0.5,
                        help="seconds of repeated invokes per int8 model")
    parser.add_argument("--runs", type=int, default=3, help="calibrate + predict + measure N times")
    parser.add_argument("--installed", action="store_true",
                        help="use the installed host target instead of calibrating each run")
    args = parser.parse_args(argv)
    floats: list[float] = []
    int8s: list[float] = []
    for run in range(args.runs):
        print(f"\n=== run {run + 1} of {args.runs} ===")
        target = host_target() if args.installed else fresh_target()
        if args.only != "int8":
            floats.append(one_pass(target, args))
        if args.only != "float":
            found = int8_pass(target, args)
            if found is not None:
                int8s.append(found)
    print()
    if floats:
        _summary("float:", floats)
    if int8s:
        _summary("int8 C:", int8s)


if __name__ == "__main__":
    main()
