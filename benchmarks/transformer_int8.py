"""int8 transformers from onnxruntime's own quantizer: ViT-tiny and the keyword transformer
(``$OPFUSE_TRANSFORMERS``, default ``transformer_models/``, what ``transformer_export.py`` writes;
or ``--models DIR``) quantized by ``quantize_static`` (QDQ, per channel,
int8 activations and weights, a few seeded random calibration inputs), compiled to int8 C and
validated against the hardware-independent reference (onnxruntime ORT_DISABLE_ALL with the
Conv/Gemm/MatMul groups summed in integers as QLinearConv/QLinearMatMul, float islands as written;
docs/architecture.md, "int8 in the IR"). Prints, on ``--trials`` seeded inputs:

- whole model: the largest difference of each output in output quantization steps;
- per kernel (host only): every kernel fed onnxruntime's inputs (``validate --per-kernel``), the
  largest int8 difference in steps and how many kernels differ at all;
- the reference's own spread: onnxruntime ORT_DISABLE_ALL beside ``onnx.reference`` (the ONNX
  package's numpy evaluator of the same QDQ graph, converted to opset 21 where its
  DequantizeLinear is), and the C beside ``onnx.reference``. Two faithful evaluations of one
  QDQ graph differ where a float rounding difference flips a tie before a QuantizeLinear.

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
SEEDS = 3  # inputs of the per-kernel run


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
        if not emulate:
            isolated(result, name)
            spread(result, name, trials)


def isolated(result, name: str) -> None:
    import tempfile

    from opfuse.measure.validate.per_kernel import per_kernel

    for seed in range(SEEDS):
        with tempfile.TemporaryDirectory() as tmp:
            report = per_kernel(result, Path(tmp) / "c", seed=seed)
        int8 = [o for k in report.kernels for o in k.outputs if o.tolerance == 1.0]
        differ = sum(1 for k in report.kernels if k.max_abs_err > 0)
        print(f"{name}: per kernel, fed onnxruntime's inputs (seed {seed}): "
              f"{len(report.kernels)} kernels, {'all' if report.ok else 'NOT all'} within "
              f"tolerance; int8 outputs at most {max(o.max_abs_err for o in int8):g} steps "
              f"({len(int8)} outputs); {differ} kernels differ at all")


class EvaluatorReference:
    """``onnx.reference.ReferenceEvaluator`` on the model, as a reference runner."""

    def __init__(self, ref):
        import onnx
        from onnx import version_converter
        from onnx.reference import ReferenceEvaluator

        self.name, self.inputs, self.outputs = "onnx.reference", ref.inputs, ref.outputs
        self._ref = ref
        self._eval = ReferenceEvaluator(version_converter.convert_version(onnx.load(ref.path), 21))

    def run(self, feeds):
        names = [o.name for o in self.outputs]
        return dict(zip(names, self._eval.run(names, feeds), strict=True))

    def random_inputs(self, seed: int):
        return self._ref.random_inputs(seed)


def spread(result, name: str, trials: int) -> None:
    from opfuse.measure.validate.c_int8 import stepped_reference, validate_c_int8
    from opfuse.measure.validate.source import validate_against_reference

    ort_ref = stepped_reference(result, integer=False)  # the float run, as the label says
    evaluator = EvaluatorReference(ort_ref)
    pairs = (("onnxruntime ORT_DISABLE_ALL", lambda: validate_against_reference(
                 result.source, ort_ref.run, label="onnxruntime", trials=trials, steps=1,
                 reference=evaluator)),
             ("generated int8 C", lambda: validate_c_int8(result, trials=trials, steps=1,
                                                          reference=evaluator)))
    for label, check in pairs:
        for out in check().outputs:
            print(f"{name}: {label} vs onnx.reference: {out.name}: max {out.max_abs_err:g} steps")


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
