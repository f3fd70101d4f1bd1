"""Kernels, cascades and peak arena with SiLU as Sigmoid + Mul vs as one Swish (``fuse_swish``).

    python benchmarks/swish_arena.py [--targets x86-host,cortex-m7] [MODEL ...]

For each model (default: MobileViT-small in both exports and EfficientNet-B0 from
``$OPFUSE_TRANSFORMERS`` (default ``transformer_models/``, written by ``transformer_export.py``)) and target, the same compile twice in one process: "split" with the
``fuse_swish`` pass taken out of canonicalization (SiLU stays ``Mul(x, Sigmoid(x))``, the Conv's
output read twice, ``multiple_consumers``), "swish" as shipped (``opfuse/passes/swish.py``).
Printed side by side: SiLUs recognised, kernels, cascades, peak arena (greedy plan) and the ratio,
and the kernel at the peak. Arena figures are deterministic (no timing), so they do not depend on
the CPU. Numerics: ``opfuse validate M --backend c`` (docs/architecture.md, "Transformer fusions").
"""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager
from pathlib import Path

import opfuse
import opfuse.passes as passes
from opfuse.analysis import analyze
from opfuse.memory import peak_step

FOLDER = Path(os.environ.get("OPFUSE_TRANSFORMERS", "transformer_models"))
MODELS = ("mobilevit", "mobilevit_dynamo", "efficientnet_b0")


@contextmanager
def without_swish():
    """Canonicalization without ``fuse_swish`` (``canonicalize`` reads ``PHASES`` per call)."""
    saved = passes.PHASES
    passes.PHASES = [[p for p in phase if p.name != "fuse_swish"] for phase in saved]
    try:
        yield
    finally:
        passes.PHASES = saved


def side(path: Path, target: str) -> dict:
    result = opfuse.compile(path, target)
    part = result.partition
    plan = analyze(result).after.plan
    return {"swish": result.passes.get("fuse_swish", 0), "kernels": len(part.kernels),
            "cascades": len(part.cascades), "peak": plan.peak_bytes,
            "peak_kernel": part.kernels[peak_step(plan).step].name}


def _mb(n: int) -> str:
    return f"{n / 2**20:8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--targets", default="x86-host,cortex-m7")
    args = parser.parse_args()
    print(f"{'model':<20}{'target':<11}{'SiLU':>5}{'kernels':>15}{'cascades':>15}"
          f"{'peak MiB':>18}{'x':>7}  peak kernel (swish)")
    print(f"{'':<36}{'split  swish':>15}{'split  swish':>15}{'split     swish':>18}")
    for name in args.models:
        path = Path(name) if name.endswith(".onnx") else FOLDER / f"{name}.onnx"
        if not path.is_file():
            print(f"{name:<20}missing ({path})")
            continue
        for target in args.targets.split(","):
            with without_swish():
                off = side(path, target)
            on = side(path, target)
            print(f"{path.stem:<20}{target:<11}{on['swish']:>5}{off['kernels']:>9}{on['kernels']:>6}"
                  f"{off['cascades']:>9}{on['cascades']:>6}{_mb(off['peak'])}  {_mb(on['peak'])}"
                  f"{off['peak'] / on['peak']:>7.2f}  {on['peak_kernel']}")


if __name__ == "__main__":
    main()
