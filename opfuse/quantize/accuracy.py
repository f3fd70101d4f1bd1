"""How far the quantized model is from the float one (docs/quantize.md, "Accuracy report").

Both run in onnxruntime at ORT_DISABLE_ALL (the QDQ model: Q/DQ around float ops, the ONNX
definition the int8 C follows within one step) on the evaluation samples. Per graph output: SQNR
(10 log10 of signal power over error power, summed over all samples), the largest absolute error,
and for a classifier's output (last axis > 1) the fraction of samples whose argmax agrees. Per
kernel: the SQNR of the tensor it writes against the float model's same tensor, so the errors
accumulated up to that kernel, ranked worst first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from opfuse.quantize.data import Samples
from opfuse.quantize.ranges import run_all, session
from opfuse.safe_text import for_terminal


@dataclass
class ErrorSum:
    """Float and quantized values of one tensor summed over samples: SQNR, max error, top-1."""

    signal: float = 0.0
    noise: float = 0.0
    max_abs: float = 0.0
    agree: int = 0
    rows: int = 0

    def add(self, f: np.ndarray, q: np.ndarray, top1: bool) -> None:
        f64, q64 = f.astype(np.float64), q.astype(np.float64)
        self.signal += float(np.sum(f64 * f64))
        self.noise += float(np.sum((f64 - q64) ** 2))
        self.max_abs = max(self.max_abs, float(np.max(np.abs(f64 - q64), initial=0.0)))
        if top1:
            a = f64.reshape(-1, f64.shape[-1]).argmax(axis=1)
            b = q64.reshape(-1, q64.shape[-1]).argmax(axis=1)
            self.agree += int(np.sum(a == b))
            self.rows += a.size

    @property
    def sqnr_db(self) -> float | None:
        """None when the quantized tensor equals the float one exactly."""
        if self.noise == 0.0:
            return None
        if self.signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)


@dataclass
class KernelError:
    index: int
    name: str
    tensor: str
    sqnr_db: float | None
    max_abs_err: float
    constant_range: bool = False
    input_sqnr_db: float | None = None  # the lowest SQNR of the activations it reads

    @property
    def loss_db(self) -> float | None:
        """What this kernel itself loses: its inputs' lowest SQNR minus its output's (None when
        either is exact or infinite)."""
        a, b = self.input_sqnr_db, self.sqnr_db
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            return None
        return a - b


@dataclass
class AccuracyReport:
    outputs: list[dict] = field(default_factory=list)
    kernels: list[KernelError] = field(default_factory=list)  # worst first

    def to_json(self) -> dict:
        return {"outputs": self.outputs,
                "kernels": [{"index": k.index, "kernel": k.name, "tensor": k.tensor,
                             "sqnr_db": _json_db(k.sqnr_db), "max_abs_err": k.max_abs_err,
                             "input_sqnr_db": _json_db(k.input_sqnr_db),
                             "loss_db": _json_db(k.loss_db),
                             "constant_range": k.constant_range} for k in self.kernels]}


def is_classifier(f: np.ndarray) -> bool:
    """One row of more than one class: its argmax is compared (top-1 agreement)."""
    return f.ndim >= 1 and f.shape[-1] > 1 and f.size == f.shape[-1]


def output_entry(name: str, e: ErrorSum) -> dict:
    """A graph output's line of the report, as JSON."""
    return {"name": name, "sqnr_db": _json_db(e.sqnr_db), "max_abs_err": e.max_abs,
            "top1_agreement": e.agree / e.rows if e.rows else None}


def _json_db(db: float | None) -> float | str | None:
    if db is None:
        return None  # exact
    return round(db, 3) if math.isfinite(db) else "-inf"


def evaluate(float_proto: onnx.ModelProto, qdq_proto: onnx.ModelProto, samples: Samples,
             kernel_tensors: list[tuple[int, str, str]], dq_of: dict[str, str],
             constant: set[str] = frozenset(),
             kernel_inputs: dict[int, tuple[str, ...]] | None = None) -> AccuracyReport:
    """``kernel_tensors``: (kernel index, kernel name, float tensor) compared through ``dq_of``;
    ``kernel_inputs``: per kernel index the tensors it reads, for its own loss."""
    outs = [o.name for o in float_proto.graph.output]
    inner = [t for _, _, t in kernel_tensors if t in dq_of and t not in outs]
    graph_in = [i.name for i in float_proto.graph.input if i.name in dq_of]  # fed, not computed
    f_sess = session(float_proto, inner)
    q_sess = session(qdq_proto, [dq_of[t] for t in [*inner, *graph_in]])
    errors = {t: ErrorSum() for t in [*outs, *inner, *graph_in]}
    top1 = {}
    q_names = [*outs, *(dq_of[t] for t in [*inner, *graph_in])]
    for i, (f_vals, q_vals) in enumerate(zip(run_all(f_sess, samples, [*outs, *inner]),
                                             run_all(q_sess, samples, q_names), strict=True)):
        f_vals.update({t: samples.arrays[t][i] for t in graph_in})
        for t, q_name in zip([*outs, *inner, *graph_in], q_names, strict=True):
            f = f_vals[t]
            top1.setdefault(t, is_classifier(f))
            errors[t].add(f, q_vals[q_name], t in outs and top1[t])
    report = AccuracyReport()
    report.outputs.extend(output_entry(t, errors[t]) for t in outs)
    for index, name, t in kernel_tensors:
        if t in errors:
            e = errors[t]
            read = [errors[x].sqnr_db for x in (kernel_inputs or {}).get(index, ()) if x in errors]
            worst_in = min((math.inf if d is None else d for d in read), default=None)
            report.kernels.append(KernelError(index, name, t, e.sqnr_db, e.max_abs, t in constant,
                                              None if worst_in == math.inf else worst_in))
    report.kernels.sort(key=lambda k: (math.inf if k.sqnr_db is None else k.sqnr_db, k.index))
    return report


def _db(db: float | str | None) -> str:
    if db is None:
        return "exact"
    return db if isinstance(db, str) else f"{db:.2f}"


def format_report(report: AccuracyReport, worst: int = 10) -> str:
    """The terminal table: outputs, then the ``worst`` kernels by SQNR."""
    lines = [f"{'output':<32} {'SQNR dB':>9} {'max |err|':>11} {'top-1':>7}"]
    for o in report.outputs:
        agree = "-" if o["top1_agreement"] is None else f"{100 * o['top1_agreement']:.0f}%"
        lines.append(f"{_short(o['name']):<32} {_db(o['sqnr_db']):>9} "
                     f"{o['max_abs_err']:>11.4g} {agree:>7}")
    if report.kernels:
        shown = report.kernels[:worst]
        more = len(report.kernels) - len(shown)
        lines.append("")
        lines.append(f"kernels by SQNR of their output vs the float model (worst first"
                     f"{f', {len(shown)} of {len(report.kernels)}' if more else ''}):")
        lines.append(f"{'#':>4} {'kernel':<24} {'tensor':<32} {'SQNR dB':>9} {'max |err|':>11}"
                     f" {'loss dB':>8}")
        for k in shown:
            flag = "  constant range" if k.constant_range else ""
            loss = "-" if k.loss_db is None else f"{k.loss_db:.2f}"
            lines.append(f"{k.index:>4} {_short(k.name, 24):<24} {_short(k.tensor):<32} "
                         f"{_db(_json_db(k.sqnr_db)):>9} {k.max_abs_err:>11.4g} {loss:>8}{flag}")
        lossy = max((k for k in report.kernels if k.loss_db is not None),
                    key=lambda k: k.loss_db, default=None)
        if lossy is not None:
            lines.append(f"loss: its inputs' lowest SQNR minus its output's; the most is kernel "
                         f"{lossy.index} ({_short(lossy.name, 40)}, {lossy.loss_db:.2f} dB): "
                         "--keep-float it to see what float buys there")
    return "\n".join(lines)


def _short(name: str, width: int = 32) -> str:
    text = for_terminal(name)
    return text if len(text) <= width else "..." + text[-(width - 3):]
