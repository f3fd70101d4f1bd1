"""``compile --precision int8 --check``: the int8 C of a model opfuse quantized, against the FLOAT
model it came from (docs/quantize.md, "In one step").

The C is built and run on the evaluation samples (``--eval``, or the held-out part of the
calibration data). Against the float model (the canonicalized one, in onnxruntime) it gets the
accuracy report's figures per output: SQNR, the largest absolute error, top-1 agreement. That is
no pass/fail: what a model may lose is its user's call. What is judged, as every ``--check``
judges the C against what it claims to compute, is the C against its own QDQ model in
onnxruntime (ORT_DISABLE_ALL, its Conv/Gemm/MatMul groups in integers as QLinearConv defines
them: the reference ``validate`` judges, integer_reference.py) on the same samples: within
``STEPS`` quantization step of each output (docs/architecture.md, "int8 in the IR"), or exit status 1. A model with int8 inputs and
outputs (``--io int8``) is fed each sample quantized with its input's scale and zero point, and its
int8 outputs are dequantized with theirs for the comparison with the float model.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from opfuse.measure.validate.integer_reference import integer_reference
from opfuse.quantize.accuracy import (
    AccuracyReport,
    ErrorSum,
    format_report,
    is_classifier,
    output_entry,
)
from opfuse.quantize.int8_io import dequantize_output, quantize_feed
from opfuse.quantize.placement import root
from opfuse.quantize.ranges import session

STEPS = 1  # what validate allows a QDQ ONNX model's int8 C (a float accumulation tie)


@dataclass
class CAccuracy:
    report: AccuracyReport  # the C against the float model (outputs only)
    steps: dict[str, float] = field(default_factory=dict)  # output -> largest |C - QDQ| in steps
    samples: int = 0

    @property
    def ok(self) -> bool:
        return all(s <= STEPS for s in self.steps.values())

    def to_json(self) -> dict:
        return {"samples": self.samples, "vs_float": self.report.to_json()["outputs"],
                "vs_qdq_steps": self.steps, "allowed_steps": STEPS, "ok": self.ok}


def c_accuracy(done, qdq_result, *, fuse: bool = True,  # noqa: ANN001 (Quantized, CompileResult)
               cascades: bool = True) -> CAccuracy:
    """Build the int8 C of ``qdq_result`` (``done.proto`` compiled) and run it on
    ``done.evaluation`` beside the float and the QDQ model."""
    from opfuse.backends.c.emit import emit_c
    from opfuse.measure.run.host import CModel

    samples = done.evaluation
    outs = [o.name for o in done.float_proto.graph.output]
    scales = {t: done.params[root(done.placement, t)][0] for t in outs
              if root(done.placement, t) in done.params}
    f_sess = session(done.float_proto)
    q_sess = session(integer_reference(done.proto).proto)
    io = {t.name: t for t in done.io}
    errors = {t: ErrorSum() for t in outs}
    steps = dict.fromkeys(outs, 0.0)
    with tempfile.TemporaryDirectory(prefix="opfuse-int8-check-") as tmp:
        emit_c(qdq_result, Path(tmp) / "model", fuse=fuse, cascades=cascades)
        model = CModel(Path(tmp) / "model")
        in_names = [i.name for i in model.info.inputs]
        for i in range(samples.count):
            feeds = samples.feeds(i)
            q_feeds = {k: quantize_feed(v, io[k]) if k in io else v for k, v in feeds.items()}
            # the C's inputs and outputs are the QDQ model's, in its order
            c_outs = model.run(dict(zip(in_names, q_feeds.values(), strict=True)))
            c_vals = [_read(np.asarray(v), io.get(t)) for t, v in zip(outs, c_outs.values(),
                                                                      strict=True)]
            f_vals = f_sess.run(outs, feeds)
            q_vals = [_read(v, io.get(t)) for t, v in zip(outs, q_sess.run(outs, q_feeds),
                                                         strict=True)]
            for t, c, f, q in zip(outs, c_vals, f_vals, q_vals, strict=True):
                c = c.reshape(f.shape)
                errors[t].add(f, c, is_classifier(f))
                diff = float(np.max(np.abs(c.astype(np.float64) - q), initial=0.0))
                steps[t] = max(steps[t], diff / scales[t] if t in scales else diff)
    report = AccuracyReport(outputs=[output_entry(t, errors[t]) for t in outs])
    return CAccuracy(report, {t: round(s, 3) for t, s in steps.items()}, samples.count)


def _read(value: np.ndarray, io) -> np.ndarray:  # noqa: ANN001 (IoTensor or None)
    """An output as the float model returns it (an int8 output dequantized)."""
    return value if io is None else dequantize_output(value, io)


def format_c_accuracy(measured: CAccuracy, on: str) -> str:
    """The terminal lines of ``compile --precision int8 --check``."""
    from opfuse.safe_text import for_terminal

    lines = [f"check: the int8 C against the float model on {on}:",
             format_report(measured.report), ""]
    worst = max(measured.steps.values(), default=0.0)
    judged = ("within" if measured.ok else "beyond")
    lines.append(f"check: the int8 C against its QDQ model in onnxruntime (ORT_DISABLE_ALL) on the "
                 f"same samples: largest difference {worst:g} quantization steps, {judged} the "
                 f"{STEPS} allowed")
    lines.append("  (its Conv/Gemm/MatMul groups summed in integers, as QLinearConv defines them "
                 "and the C computes: the reference validate judges)")
    for t, s in measured.steps.items():
        if s > STEPS:
            lines.append(f"  {for_terminal(t)}: {s:g} steps")
    return "\n".join(lines)
