"""A float model to int8 C in one step (`compile --precision int8 --calibration`, issue 30),
beside its float build and, where the corpus has it, the TFLite converter's int8 `.tflite`.

Per model: the float C and the int8 C of the model opfuse quantized (32 normal(0,1) calibration
samples, minmax, per channel, Q/DQ at cortex-m7's kernel boundaries, written as `model.qdq.onnx`
beside the C), each validated as `opfuse validate --backend c` does on x86-host and under QEMU on
cortex-m7 (`--emulate`): verdict and largest difference (float: against onnxruntime; int8: in
quantization steps against onnxruntime's ORT_DISABLE_ALL run of its own QDQ model), the arena
bytes, flash bytes and instructions of one inference (QEMU -icount, deterministic), and the int8
build's SQNR against the float model on 20 held-out inputs. Each model is quantized twice, with
float inputs and outputs (the default) and with `--io int8` (int8 inputs and outputs, as the
converter's `.tflite`), the same calibration: only the boundary Q/DQ differ.

    PYTHONPATH=$PWD python benchmarks/quantize_builds.py [--models ds_cnn,vww]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opfuse import api  # noqa: E402
from opfuse.quantize.data import Samples  # noqa: E402
from opfuse.quantize.driver import float_onnx, input_shapes  # noqa: E402

SHARED = REPO.parent / "shared" / "models" / "tflite"
MODELS = {  # name -> (float model, the converter's int8 .tflite or None)
    "ds_cnn": ("ds_cnn", None),
    "vww": (str(SHARED / "vww_96_float.tflite"), str(SHARED / "vww_96_int8.tflite")),
    "ad01": (str(SHARED / "ad01_fp32.tflite"), str(SHARED / "ad01_int8.tflite")),
    "resnet8": (str(SHARED / "pretrainedResnet.tflite"), str(SHARED / "pretrainedResnet_quant.tflite")),
    "mobilenet_v2": (str(SHARED.parent / "onnx" / "mobilenet_v2_128_0.5.onnx"), None),
}
TARGET = "cortex-m7"


def _samples(result, count: int, seed: int) -> Samples:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    arrays = {s.name: rng.standard_normal((count, *s.shape)).astype(np.float32)
              for s in input_shapes(float_onnx(result))}
    return Samples(f"normal(0,1) seed {seed}", arrays, count)


def _verdict(report) -> str:  # noqa: ANN001
    worst = max((o.max_abs_err for o in report.outputs), default=0.0)
    unit = " steps" if any("steps" in n for n in report.notes) else ""
    return f"{'ok' if report.ok else 'MISMATCH'} ({worst:g}{unit})"


def _row(label: str, source: str) -> list[str]:
    host = api.validate_c(source, "x86-host")
    emu = api.emulate_c(source, TARGET)
    return [label, _verdict(host), _verdict(emu.report), f"{emu.footprint.arena:,}",
            f"{emu.footprint.flash:,}", f"{emu.instructions:,}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    header = ["model / build", "x86-host C", f"{TARGET} QEMU", "arena B", "flash B",
              "instructions", "SQNR dB"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    with tempfile.TemporaryDirectory(prefix="opfuse-qbuilds-") as tmp:
        for name in args.models.split(","):
            src, converted = MODELS[name]
            if src != "ds_cnn" and not Path(src).exists():
                print(f"| {name} | absent ({src}) |")
                continue
            result = api.compile(src, TARGET)
            print("| " + " | ".join(_row(f"{name} float", src) + ["-"]) + " |", flush=True)
            for io in ("float", "int8"):
                done = api.quantize(result, _samples(result, 32, 0),
                                    evaluation=_samples(result, 20, 1), io=io)
                qdq = Path(tmp) / f"{name}.{io}.qdq.onnx"
                onnx.save(done.proto, qdq)
                sqnr = done.accuracy.outputs[0]["sqnr_db"]
                print("| " + " | ".join(_row(f"{name} int8 (opfuse quantize, --io {io})",
                                             str(qdq)) + [f"{sqnr}"]) + " |", flush=True)
            if converted is not None and Path(converted).exists():
                print("| " + " | ".join(_row(f"{name} int8 (TFLite converter's)", converted)
                                        + ["-"]) + " |", flush=True)


if __name__ == "__main__":
    main()
