"""opfuse's ethos-u55 estimate against Arm Vela's, on every int8 ``.tflite`` in ../shared/models/tflite.

For each model: Vela runs with the configuration the target file names (``[perf.vela]``), and
``opfuse analyze`` costs the same file at its own dtypes. One table: latency (ours, Vela's, the
relative error), SRAM (our planned arena against Vela's "Total SRAM used"), kernels against Vela's
NPU operations. Aims (issue 11): median |error| <= 15%, no model beyond 30%.

    python benchmarks/vs_vela.py [--target ethos-u55] [MODEL.tflite ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from opfuse import api
from opfuse.measure.vela_run import compare_vela, vela_available

SHARED_TFLITE = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tflite"
AIM_MEDIAN, AIM_MAX = 0.15, 0.30


def is_int8(path: Path) -> bool:
    """A quantized model: int8/uint8 tensors inside (mcunet_vww takes float and quantizes it)."""
    from opfuse.frontends.tflite.reader import read_tflite_file

    model = read_tflite_file(path)
    return any(t.dtype in (np.int8, np.uint8) and t.quant is not None for t in model.tensors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--target", default="ethos-u55")
    args = parser.parse_args(argv)
    if not vela_available():
        print("Vela is not installed: pip install 'opfuse[vela]'", file=sys.stderr)
        return 2
    paths = [Path(m) for m in args.models] or sorted(SHARED_TFLITE.glob("*.tflite"))
    paths = [p for p in paths if is_int8(p)]
    if not paths:
        print(f"no int8 .tflite models (looked in {SHARED_TFLITE})", file=sys.stderr)
        return 2
    head = (f"{'model':24} {'opfuse us':>10} {'Vela us':>10} {'error':>7}  {'arena KiB':>9} "
            f"{'Vela SRAM KiB':>13} {'arena<=Vela':>11}  {'kernels':>7} {'Vela ops':>8}")
    print(f"target {args.target}")
    print(head)
    print("-" * len(head))
    errors = []
    for path in paths:
        result = api.compile(str(path), target=args.target)
        analysis = api.analyze(result)
        c = compare_vela(result, analysis)
        errors.append(c.error)
        cpu = "*" if c.opfuse_npu_s != c.opfuse_s else " "
        print(f"{path.stem + cpu:24} {c.opfuse_npu_s * 1e6:10.1f} {c.vela_summary_s * 1e6:10.1f} "
              f"{c.error * 100:+6.1f}%  {c.opfuse_npu_arena_bytes / 1024:9.1f} "
              f"{c.vela_sram_bytes / 1024:13.1f} "
              f"{str(c.opfuse_npu_arena_bytes <= c.vela_sram_bytes):>11}"
              f"  {c.opfuse_kernels:7d} {c.vela_passes:8d}", flush=True)
    med = statistics.median(abs(e) for e in errors)
    worst = max(abs(e) for e in errors)
    print("-" * len(head))
    print("* Vela runs part of the model on the CPU (a float input's QUANTIZE): opfuse's latency and "
          "arena here cover the rows Vela runs on its NPU, as Vela's figures do")
    print(f"median |error| {med * 100:.1f}% (aim <= {AIM_MEDIAN * 100:.0f}%): "
          f"{'met' if med <= AIM_MEDIAN else 'MISSED'}; largest {worst * 100:.1f}% "
          f"(aim <= {AIM_MAX * 100:.0f}%): {'met' if worst <= AIM_MAX else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
