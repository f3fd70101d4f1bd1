"""What settling shapes at import costs and buys (opfuse/frontends/static_shapes.py): per model,
the import with and without the re-inference rounds, interleaved, and what each leaves unknown.

    PYTHONPATH=$PWD python benchmarks/import_settle.py MODEL.onnx ... [--repeats 3]

Prints, per model: the median import time of each (and their ratio), the rounds run, and the
node outputs of unknown size and Shape ops each import leaves. The CPU is printed first.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from unittest import mock

import onnx

from opfuse.frontends import import_proto, onnx_frontend
from opfuse.ir import is_static
from opfuse.measure.calibrate.host import cpu_name


def _unsettled(model) -> tuple[int, int]:  # noqa: ANN001 (an onnx_ir Model)
    unknown = sum(1 for n in model.graph for v in n.outputs if v.uses() and not is_static(v))
    return unknown, sum(1 for n in model.graph if n.op_type == "Shape")


def _import(proto: onnx.ModelProto, path: Path, settle: bool):  # noqa: ANN202
    if settle:
        return import_proto(proto, path)
    with mock.patch.object(onnx_frontend, "settle_shapes", lambda *a: 0):
        return import_proto(proto, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"CPU: {cpu_name()}; median of {args.repeats}, the two imports interleaved")
    print(f"{'model':28} {'without s':>10} {'with s':>8} {'ratio':>6}  unknown/Shape left: "
          "without -> with")
    for path in args.models:
        proto = onnx.load(path)
        times: dict[bool, list[float]] = {False: [], True: []}
        left: dict[bool, tuple[int, int]] = {}
        for _ in range(args.repeats):
            for settle in (False, True):
                start = time.perf_counter()
                model = _import(proto, path, settle)
                times[settle].append(time.perf_counter() - start)
                left[settle] = _unsettled(model)
        off, on = (statistics.median(times[k]) for k in (False, True))
        print(f"{path.name:28} {off:10.2f} {on:8.2f} {on / off:6.2f}  "
              f"{left[False][0]}/{left[False][1]} -> {left[True][0]}/{left[True][1]}")


if __name__ == "__main__":
    main()
