"""SQNR of `opfuse quantize` against the TFLite converter and onnxruntime's quantize_static.

For every model: 32 normal(0,1) calibration samples (seed 0) and 20 held-out normal(0,1) inputs
(seed 1). opfuse quantizes the model at its kernels' boundaries for the target (minmax, per
channel); onnxruntime's quantize_static gets the source float ONNX (for a .tflite or a built-in
model: opfuse's canonicalized float ONNX, which it cannot tell apart) with its defaults except
QDQ format and per-channel weights (MinMax, int8 activations and weights). Both quantized models
and the float reference (opfuse's canonicalized float model, equal to the source within float
rounding) run in onnxruntime at ORT_DISABLE_ALL (the ONNX definition of Q/DQ). SQNR is over all
elements of the first graph output and all 20 inputs.

With TensorFlow importable (its own venv: docs/quantize.md), two more things: the five Keras edge
networks of benchmarks/keras_edge_nets.py (random weights, random BN statistics) are built and
converted to a float .tflite, which is the model opfuse and quantize_static quantize, and a
"converter" column gives the TFLite converter's full-int8 model of every float .tflite (the same
32 calibration samples as its representative dataset; per channel, its default), run in LiteRT's
reference kernels on the same 20 inputs. Without TensorFlow the script says so and prints the other columns.

    PYTHONPATH=. python benchmarks/quantize_accuracy.py [--models NAME...] [--keras NAME...]
        [--method percentile|entropy|mse] [--target x86-host]

The "opfuse" column is ``opfuse quantize`` with its default (minmax); the next one the --method
given (default mse). "-tflite" and "-ort" are the opfuse column minus the converter's / ort's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

SHARED = Path("/work/shared/models")
MODELS = [
    "seed_block", "ds_cnn", "mobilenet_v2", "resnet18",
    str(SHARED / "onnx/mobilenet_v2_128_0.5.onnx"),
    str(SHARED / "onnx/light_squeezenet.onnx"),
    str(SHARED / "onnx/light_shufflenet.onnx"),
    str(SHARED / "onnx/light_resnet50.onnx"),
    str(SHARED / "onnx/Ultraface_version-RFB-320.onnx"),
    str(SHARED / "onnx/pytorch-converted_test_Conv2d_groups.onnx"),
    str(SHARED / "tflite/pretrainedResnet.tflite"),
    str(SHARED / "tflite/vww_96_float.tflite"),
    str(SHARED / "tflite/ad01_fp32.tflite"),
]
CAL, HELD_OUT = 32, 20
KERAS = ["autoencoder", "ds_cnn_keras", "mobilenet_v1_keras", "mobilenet_v2_keras", "resnet8_keras"]


def samples(shapes, count: int, seed: int, where: str):
    from opfuse.quantize.data import Samples

    rng = np.random.default_rng(seed)
    arrays = {s.name: rng.standard_normal((count, *s.shape)).astype(np.float32) for s in shapes}
    return Samples(where, arrays, count)


def sqnr(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    f = np.concatenate([r.ravel() for r in ref]).astype(np.float64)
    q = np.concatenate([g.ravel() for g in got]).astype(np.float64)
    noise = float(np.sum((f - q) ** 2))
    return math.inf if noise == 0 else 10 * math.log10(float(np.sum(f * f)) / noise)


def outputs(proto: onnx.ModelProto, ev) -> list[np.ndarray]:
    from opfuse.quantize.ranges import run_all, session

    sess = session(proto)
    name = sess.get_outputs()[0].name
    return [v[name] for v in run_all(sess, ev, [name])]


def ort_static(source_onnx: onnx.ModelProto, cal, folder: Path) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    src, out = folder / "float.onnx", folder / "ort_qdq.onnx"
    onnx.save(source_onnx, src)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.i = 0

        def get_next(self):  # noqa: ANN201 (onnxruntime's interface)
            if self.i >= cal.count:
                return None
            self.i += 1
            return cal.feeds(self.i - 1)

    quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True)
    return onnx.load(out)


def converter(model: str, cal, ev, ref, tf_nets, int8: bytes | None):
    """SQNR of the TFLite converter's int8 model of the float .tflite ``model`` (``int8``: the
    one it wrote from the Keras model), or why there is none."""
    if tf_nets is None:
        return "no TF"
    if not model.endswith(".tflite"):
        return "-"
    if len(cal.arrays) != 1:
        return "inputs>1"
    (x_cal,), (x_ev,) = cal.arrays.values(), ev.arrays.values()
    if x_cal.shape[1] == 1:  # the batch of 1 of each sample
        x_cal, x_ev = x_cal[:, 0], x_ev[:, 0]
    try:
        if int8 is None:
            int8 = tf_nets.quantize_tflite(Path(model).read_bytes(), x_cal)
        return sqnr(ref, tf_nets.run_tflite(int8, x_ev))
    except Exception as exc:  # noqa: BLE001 (a peer's failure is a row, not a crash)
        return f"failed: {str(exc).splitlines()[0][:40]}"


def one(model: str, target: str, method: str, tf_nets=None, int8: bytes | None = None) -> dict:
    from opfuse import api
    from opfuse.quantize.driver import float_onnx, input_shapes

    t0 = time.perf_counter()
    result = api.compile(model, target=target)
    float_proto = float_onnx(result)
    shapes = input_shapes(float_proto)
    cal = samples(shapes, CAL, 0, "normal(0,1) seed 0")
    ev = samples(shapes, HELD_OUT, 1, "normal(0,1) seed 1")
    done = api.quantize(result, cal, evaluation=ev)
    ref = outputs(float_proto, ev)
    row = {"model": Path(model).name, "kernels": len(result.partition.without_cascades().kernels),
           "opfuse": sqnr(ref, outputs(done.proto, ev)), "constant": len(done.collapsed),
           "tflite": converter(model, cal, ev, ref, tf_nets, int8)}
    if method != "minmax":
        other = api.quantize(result, cal, evaluation=ev, method=method)
        row["other"] = sqnr(ref, outputs(other.proto, ev))
    source = onnx.load(model) if model.endswith(".onnx") else float_proto
    with tempfile.TemporaryDirectory() as tmp:
        try:
            theirs = ort_static(source, cal, Path(tmp))
        except Exception as exc:  # noqa: BLE001 (a peer's failure is a row, not a crash)
            row["ort"] = f"failed: {str(exc).splitlines()[0][:60]}"
            return row
        try:
            row["ort"] = sqnr(ref, outputs(theirs, ev))
        except Exception:  # noqa: BLE001
            # quantize_static keeps opset 12 with per-axis DequantizeLinear, which onnxruntime
            # refuses (issue 30): measured after onnx's version converter raises it to 13
            from onnx import version_converter

            try:
                raised = version_converter.convert_version(theirs, 13)
                row["ort"] = sqnr(ref, outputs(raised, ev))
                row["note"] = "ort: its opset-12 output does not load; raised to 13"
            except Exception as exc:  # noqa: BLE001
                row["ort"] = "no load"
                row["note"] = f"ort: its output does not load, nor raised: {str(exc)[:50]}"
    row["seconds"] = time.perf_counter() - t0
    return row


def keras_models(names: list[str], tf_nets, folder: Path) -> list[tuple[str, bytes]]:
    """(float .tflite path, the converter's int8 flatbuffer) of each Keras network."""
    made = []
    for name in names:
        model = tf_nets.build(name)
        shape = tuple(model.inputs[0].shape[1:])
        x_cal = np.random.default_rng(0).standard_normal((CAL, 1, *shape)).astype(np.float32)
        with contextlib.redirect_stdout(io.StringIO()):  # Keras prints what it exports
            float_tfl, int8 = tf_nets.convert(model, x_cal[:, 0])
        path = folder / f"{name}.tflite"
        path.write_bytes(float_tfl)
        made.append((str(path), int8))
    return made


def _cell(v) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--keras", nargs="*", default=KERAS, choices=KERAS)
    parser.add_argument("--method", default="mse", help="a second opfuse column (minmax is the "
                        "first)")
    parser.add_argument("--target", default="x86-host")
    args = parser.parse_args()
    try:
        import keras_edge_nets as tf_nets  # benchmarks/, on the path when run as a script
        import tensorflow as tf

        tflite_note = (f"TFLite converter: TensorFlow {tf.__version__}, its int8 run in LiteRT's "
                       "reference kernels (BUILTIN_REF)")
    except ImportError:
        tf_nets = None
        tflite_note = ("TFLite converter: tensorflow not installed, its column and the Keras "
                       "networks omitted")
    print(f"{CAL} normal(0,1) calibration samples, {HELD_OUT} held-out; target {args.target}; "
          "SQNR dB of the first output vs the float model")
    print(f"{'model':<44} {'kernels':>7} {'opfuse':>8} {args.method[:8]:>8} {'tflite':>8} "
          f"{'ort':>8} {'-tflite':>8} {'-ort':>7} {'s':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        todo = [(m, None) for m in args.models]
        if tf_nets is not None:
            todo = keras_models(args.keras, tf_nets, Path(tmp)) + todo
        for model, int8 in todo:
            try:
                row = one(model, args.target, args.method, tf_nets, int8)
            except Exception as exc:  # noqa: BLE001
                print(f"{Path(model).name:<44} error: {str(exc).splitlines()[0][:80]}")
                continue
            d_tfl = _delta(row["opfuse"], row["tflite"])
            d_ort = _delta(row["opfuse"], row["ort"])
            print(f"{row['model']:<44} {row['kernels']:>7} {_cell(row['opfuse']):>8} "
                  f"{_cell(row.get('other', '-')):>8} {_cell(row['tflite']):>8} {_cell(row['ort']):>8} {_cell(d_tfl):>8} "
                  f"{_cell(d_ort):>7} {row['seconds']:>6.1f}"
                  f"{'  (' + row['note'] + ')' if 'note' in row else ''}", flush=True)
    print(tflite_note)
    return 0


def _delta(a, b):
    return a - b if isinstance(a, float) and isinstance(b, float) else "-"


if __name__ == "__main__":
    sys.exit(main())
