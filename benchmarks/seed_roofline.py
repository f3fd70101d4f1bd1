"""The seeds' roofline readouts for ``seed_pipeline`` (Conv -> BN -> ReLU -> Conv -> MaxPool on
1x16x256x256, about 1M elements per tensor): fusion off/on x fp32/fp16/int8 x a CPU, a GPU and an
NPU target, all predicted by opfuse's cost model (``opfuse.analysis.analyze``, weights counted).

Columns: kernels; memory traffic (activations + weights, MB = 1e6 bytes); the memory level the
activation arena lives in; arithmetic intensity (total FLOPs / total bytes); achieved throughput
(total FLOPs / predicted latency); predicted latency; verdict (memory-bound if the summed memory time
exceeds the summed compute time, with how many kernels are memory-bound); speedup from fusion
(latency off / latency on). "Fusion off" is the model as imported, every node its own kernel.

    python benchmarks/seed_roofline.py [--model seed_pipeline] [--planner greedy-inplace]
"""

from __future__ import annotations

import argparse

from opfuse.analysis import Side, analyze
from opfuse.pipeline import compile_model

TARGETS = (("cortex-a76", "CPU"), ("mobile-gpu", "GPU"), ("npu-generic", "NPU"))
PRECISIONS = ("fp32", "fp16", "int8")
HEADER = (
    f"{'target':<18}{'prec':<6}{'fusion':<8}{'kernels':>8}{'traffic MB':>12}{'act. in':>9}"
    f"{'FLOP/B':>8}{'GFLOP/s':>10}{'latency ms':>12}  {'verdict':<18}{'speedup':>8}"
)


def _verdict(side: Side) -> str:
    kernels = side.cost.kernels
    memory = sum(k.memory_s for k in kernels) > sum(k.compute_s for k in kernels)
    bound = sum(k.bound == "memory" for k in kernels)
    return f"{'memory' if memory else 'compute'} ({bound}/{len(kernels)} mem)"


def _row(target: str, prec: str, fusion: str, side: Side, speedup: str) -> str:
    cost = side.cost
    intensity = cost.flops / cost.traffic_bytes
    throughput = cost.flops / cost.latency_s / 1e9
    return (
        f"{target:<18}{prec:<6}{fusion:<8}{cost.kernel_count:>8}{cost.traffic_bytes / 1e6:>12.2f}"
        f"{cost.activation_level:>9}{intensity:>8.2f}{throughput:>10.1f}{cost.latency_s * 1e3:>12.3f}"
        f"  {_verdict(side):<18}{speedup:>8}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="seed_pipeline")
    parser.add_argument("--planner", default="greedy-inplace")
    args = parser.parse_args(argv)
    print(f"{args.model}: predicted roofline readouts (opfuse cost model, planner {args.planner})")
    print(HEADER)
    print("-" * len(HEADER))
    for target, kind in TARGETS:
        result = compile_model(args.model, target)
        for prec in PRECISIONS:
            label = f"{target} ({kind})"
            if prec not in result.target.precisions:
                print(f"{label:<18}{prec:<6}{'':<8}  n/a: {target} runs {', '.join(result.target.precisions)}")
                continue
            analysis = analyze(result, precision=prec, planner=args.planner)
            before, after = analysis.before, analysis.after
            speedup = before.cost.latency_s / after.cost.latency_s
            print(_row(label, prec, "off", before, ""))
            print(_row(label, prec, "on", after, f"{speedup:.2f}x"))
    print(
        "\nMB = 1e6 bytes; 'act. in' = memory level holding the activation arena (it must fit there);"
        "\nfigures are predictions from the target files' cited peak rates and bandwidths."
    )


if __name__ == "__main__":
    main()
