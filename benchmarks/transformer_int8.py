"""int8 transformers from onnxruntime's own quantizer: ViT-tiny and the keyword transformer
(``$OPFUSE_TRANSFORMERS``, default ``transformer_models/``, what ``transformer_export.py`` writes;
or ``--models DIR``) quantized by ``quantize_static`` (QDQ, per channel,
int8 activations and weights, a few seeded random calibration inputs), compiled to int8 C and
validated against the hardware-independent reference (onnxruntime ORT_DISABLE_ALL, Q/DQ around
float ops; docs/architecture.md, "int8 in the IR"). Prints the largest difference of each output
in output quantization steps, on ``--trials`` seeded inputs.

    PYTHONPATH=$PWD python benchmarks/transformer_int8.py --write /tmp/t8          # quantize
    PYTHONPATH=$PWD python benchmarks/transformer_int8.py --read /tmp/t8           # x86-host
    PYTHONPATH=$PWD python benchmarks/transformer_int8.py --read /tmp/t8 --target cortex-m7 --emulate
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ("kws_transformer", "vit_tiny")


def write(source: Path, folder: Path, samples: int) -> None:
    import onnx

    sys.path.insert(0, str(REPO))
    from tests.helpers.quant import quantize

    for name in MODELS:
        path = source / f"{name}.onnx"
        if not path.is_file():
            print(f"{name}: {path} is absent, skipped")
            continue
        (folder / name).mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        out = quantize(onnx.load(path), folder / name, "qdq", per_channel=True, samples=samples)
        print(f"{name}: {out} ({time.perf_counter() - start:.0f} s)")


def read(folder: Path, target: str, trials: int, emulate: bool) -> None:
    from opfuse.api import compile as compile_model
    from opfuse.errors import OpfuseError

    for name in MODELS:
        path = folder / name / "qdq_int8.onnx"
        if not path.is_file():
            continue
        start = time.perf_counter()
        try:
            result = compile_model(path, target)
            if emulate:
                from opfuse.measure.run.qemu import emulate_c
                report = emulate_c(result, trials=trials, timeout_s=3600).report
            else:
                from opfuse.measure.validate.c_int8 import validate_c_int8
                report = validate_c_int8(result, trials=trials)
        except OpfuseError as err:
            print(f"{name} {target}: refused: {err}")
            continue
        for out in report.outputs:
            print(f"{name} {target}: {out.name}: max {out.max_abs_err:g} steps over {trials} "
                  f"inputs, {'ok' if report.ok else 'FAIL'} ({time.perf_counter() - start:.0f} s)")
        for note in report.notes:
            print(f"  {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="quantize the models into this folder")
    ap.add_argument("--read", type=Path, help="compile and validate the quantized models here")
    ap.add_argument("--models", type=Path, default=Path(os.environ.get("OPFUSE_TRANSFORMERS", "transformer_models")))
    ap.add_argument("--samples", type=int, default=4, help="calibration inputs")
    ap.add_argument("--target", default="x86-host")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--emulate", action="store_true", help="run the C in QEMU (cortex-m4/m7)")
    args = ap.parse_args()
    if args.write:
        write(args.models, args.write, args.samples)
    if args.read:
        read(args.read, args.target, args.trials, args.emulate)


if __name__ == "__main__":
    main()
