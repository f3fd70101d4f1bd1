"""Activation ranges at the kernels' boundaries, and the int8 parameters they give.

The float model runs in onnxruntime with every tensor the placement quantizes added as a graph
output, once per calibration sample. ``minmax`` keeps the running min and max (what
onnxruntime's MinMaxCalibrater computes, without its graph augmentation: the tensors are ours to
choose). ``entropy`` and ``percentile`` feed the same arrays to onnxruntime.quantization's
HistogramCollector, with quantize_static's defaults (entropy: 128 bins, 128 quantized bins;
percentile: 2048 bins, 99.999 %), and take its thresholds. ``mse`` runs the samples a second
time into histograms over those min/max ranges and searches each tensor's clipping range of least
int8 quantization error (mse.py; no onnxruntime calibrator does that).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from opfuse.errors import OpfuseError
from opfuse.quantize.data import Samples

METHODS = ("minmax", "percentile", "entropy", "mse")
QMIN, QMAX = -128, 127


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    constant: bool  # every calibration value of the tensor was the same


def session(proto: onnx.ModelProto, extra: list[str] = ()) -> ort.InferenceSession:
    """An onnxruntime session on ``proto`` (optimizations off: the graph as written, Q/DQ around
    float ops, the ONNX definition) with ``extra`` tensors as additional outputs."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    have = {o.name for o in model.graph.output}
    for name in extra:
        if name not in have:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            have.add(name)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 (onnxruntime raises its own kinds)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise OpfuseError(f"onnxruntime cannot load the model to calibrate it: {first}") from None


def run_all(sess: ort.InferenceSession, samples: Samples, names: list[str]):
    """Yield, per sample, name -> array for ``names``."""
    for i in range(samples.count):
        values = sess.run(names, samples.feeds(i))
        yield dict(zip(names, values, strict=True))


def collect_ranges(proto: onnx.ModelProto, tensors: list[str], samples: Samples,
                   method: str = "minmax") -> dict[str, Range]:
    """Per tensor, its calibrated range over ``samples`` by ``method``."""
    if method not in METHODS:
        raise OpfuseError(f"--method {method}: not one of {', '.join(METHODS)}")
    sess = session(proto, tensors)
    lo = {t: np.inf for t in tensors}
    hi = {t: -np.inf for t in tensors}
    collector = _histogram(method) if method in ("entropy", "percentile") else None
    for values in run_all(sess, samples, tensors):
        for t, a in values.items():
            lo[t] = min(lo[t], float(a.min(initial=np.inf)))
            hi[t] = max(hi[t], float(a.max(initial=-np.inf)))
        if collector is not None:
            with contextlib.redirect_stdout(io.StringIO()):  # it prints its progress
                collector.collect({t: [np.asarray(a, np.float32)] for t, a in values.items()})
    thresholds = {}
    if collector is not None:
        with contextlib.redirect_stdout(io.StringIO()):
            thresholds = collector.compute_collection_result()
    if method == "mse":
        thresholds = _mse_ranges(sess, samples, tensors, lo, hi)
    ranges = {}
    for t in tensors:
        constant = lo[t] == hi[t]
        a, b = lo[t], hi[t]
        if t in thresholds and not constant:
            a, b = float(np.asarray(thresholds[t][0])), float(np.asarray(thresholds[t][1]))
        ranges[t] = Range(a, b, constant)
    return ranges


def _mse_ranges(sess, samples: Samples, tensors: list[str], lo: dict, hi: dict) -> dict:
    """Per tensor whose range did not collapse, the (lo, hi) of least quantization MSE."""
    from opfuse.quantize.mse import Histogram, best_range

    hists = {t: Histogram(lo[t], hi[t]) for t in tensors if hi[t] > lo[t]}
    if not hists:
        return {}
    for values in run_all(sess, samples, list(hists)):
        for t, a in values.items():
            hists[t].add(a)
    return {t: best_range(h) for t, h in hists.items()}


def _histogram(method: str):
    from onnxruntime.quantization.calibrate import HistogramCollector

    if method == "entropy":
        return HistogramCollector("entropy", False, 128, 128, 99.999, "same")
    return HistogramCollector("percentile", False, 2048, 128, 99.999, "same")


def asymmetric(r: Range) -> tuple[float, int]:
    """int8 asymmetric (scale, zero point) of a range, widened to hold 0 (TFLite's nudging:
    real 0 is exactly representable). A range that collapses to {0} gets scale 1/255 rather than
    a zero scale (the caller reports it)."""
    lo, hi = min(r.lo, 0.0), max(r.hi, 0.0)
    if not hi > lo:
        return 1.0 / 255.0, QMIN
    scale = (hi - lo) / float(QMAX - QMIN)
    zp = int(np.clip(np.rint(QMIN - lo / scale), QMIN, QMAX))
    return float(np.float32(scale)), zp
