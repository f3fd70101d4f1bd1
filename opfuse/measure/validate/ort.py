"""Run two models in onnxruntime on the same inputs and compare every output.

Both run on the CPU provider with graph optimizations disabled, so onnxruntime's own fusions do not
blur the comparison (com.microsoft ops such as FusedConv still run). Inputs are seeded random
(normal float32 for float inputs, integers in [0, 10) for int inputs, booleans for bool; an integer
input a Gather reads as indices within its table, a mask all ones: opfuse/measure/validate/input_ranges.py) built from
the ORIGINAL model's inputs, a leading symbolic dim bound to 1; or they are read from an ``.npz``.

Per output, with ``ref`` the original's output and ``out`` the optimized one's:

* max abs err = max |out - ref|;
* max rel err = max abs err / max |ref| (relative to the output's scale: an elementwise ratio is
  meaningless where ``ref`` is near 0);
* cosine = <out, ref> / (|out| |ref|) (1 when both are all zero);
* ok: max abs err <= atol + rtol * max |ref|, and no NaN where the other model has a number.

Positions where both models give the same NaN or infinity count as equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from opfuse.errors import OpfuseError
from opfuse.frontends.arrays import read_npz
from opfuse.frontends.limits import refuse, tensor_bytes
from opfuse.measure.validate.given_inputs import check_inputs, specs_of_session
from opfuse.measure.validate.input_ranges import IndexRange, describe, index_ranges
from opfuse.safe_text import for_terminal

ModelArg = onnx.ModelProto | str | Path
# a float output whose error is at most this times the reference's own kernel-to-kernel spread is
# rounding of the reference's size (reference_spread.py weighs it)
SPREAD_FACTOR = 2.0
_UPGRADE_OPSET = 14  # onnxruntime has no kernels for some old opsets (BatchNormalization-6)


@dataclass(frozen=True)
class OutputCheck:
    name: str
    shape: tuple[int, ...]
    max_abs_err: float
    max_rel_err: float
    cosine: float
    max_ref: float  # max |reference output|
    tolerance: float  # atol + rtol * max_ref
    ok: bool


@dataclass(frozen=True)
class ValidationReport:
    outputs: tuple[OutputCheck, ...]
    rtol: float
    atol: float
    inputs: str  # where the inputs came from: "random (seed 0)" or the .npz path
    notes: tuple[str, ...] = ()
    # every mismatch is within the reference's own kernel-to-kernel spread (reference_spread.py)
    tolerance_question: bool = False

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    def by_name(self) -> dict[str, OutputCheck]:
        return {o.name: o for o in self.outputs}


def validate(
    original: ModelArg,
    optimized: ModelArg,
    *,
    inputs: Mapping[str, np.ndarray] | str | Path | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    seed: int = 0,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
) -> ValidationReport:
    """Compare ``optimized`` against ``original`` (see the module docstring for the rule);
    ``input_values`` (``--input-value``) are fed to the original whatever the inputs."""
    notes: list[str] = []
    ref_sess = reference_session(original, "original", notes)
    opt_sess = reference_session(optimized, "optimized", notes)
    if inputs is None:
        spans = index_ranges(original)
        feeds = random_inputs(ref_sess, seed, input_shapes, ranges=spans)
        source = f"random (seed {seed})"
        notes.extend(filter(None, [describe(spans)]))
    elif isinstance(inputs, str | Path):
        feeds = _npz_inputs(Path(inputs), ref_sess)
        source = str(inputs)
    else:
        feeds = _given_inputs(dict(inputs), ref_sess, "inputs")
        source = "given arrays"
    feeds.update(input_values or {})
    ref_names = [o.name for o in ref_sess.get_outputs()]
    opt_names = [o.name for o in opt_sess.get_outputs()]
    if sorted(ref_names) != sorted(opt_names):
        raise OpfuseError(
            f"the models have different outputs: original {ref_names}, optimized {opt_names}"
        )
    missing = [i.name for i in opt_sess.get_inputs() if i.name not in feeds]
    if missing:
        raise OpfuseError(
            f"the optimized model reads input '{missing[0]}', which the original lacks"
        )
    ref_out = run_session(ref_sess, feeds, _label(original, "original"))
    opt_feeds = {i.name: feeds[i.name] for i in opt_sess.get_inputs()}
    opt_out = dict(
        zip(opt_names, run_session(opt_sess, opt_feeds, _label(optimized, "optimized")), strict=True)
    )
    checks = []
    for name, ref in zip(ref_names, ref_out, strict=True):
        out = opt_out[name]
        if np.shape(ref) != np.shape(out):
            raise OpfuseError(
                f"output '{name}' has shape {list(np.shape(ref))} in the original and "
                f"{list(np.shape(out))} in the optimized model"
            )
        checks.append(compare(name, np.asarray(ref), np.asarray(out), rtol, atol))
    return ValidationReport(tuple(checks), rtol, atol, source, tuple(notes))


def compare(name: str, ref: np.ndarray, out: np.ndarray, rtol: float, atol: float) -> OutputCheck:
    """The error figures of one output (``ref``: original, ``out``: optimized)."""
    a = ref.astype(np.float64).ravel()
    b = out.astype(np.float64).ravel()
    same = (a == b) | (np.isnan(a) & np.isnan(b))  # equal infinities and NaN pairs
    finite = np.isfinite(a) & np.isfinite(b)
    bad = ~same & ~finite  # NaN or infinity on one side only
    diff = np.abs(a[finite] - b[finite])
    max_abs = float("inf") if bad.any() else float(diff.max(initial=0.0))
    max_ref = float(np.abs(a[np.isfinite(a)]).max(initial=0.0))
    max_rel = max_abs / max_ref if max_ref > 0 else (0.0 if max_abs == 0 else float("inf"))
    tolerance = atol + rtol * max_ref
    return OutputCheck(
        name=name,
        shape=tuple(int(d) for d in ref.shape),
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        cosine=cosine(a[finite], b[finite]),
        max_ref=max_ref,
        tolerance=tolerance,
        ok=bool(max_abs <= tolerance),
    )


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """<a, b> / (|a| |b|); 1.0 when both are zero (or empty), 0.0 when only one is."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def format_report(report: ValidationReport) -> str:
    """A small table for the terminal, then the rule and the verdict."""
    head = ("output", "shape", "max abs err", "max rel err", "cosine", "tolerance", "ok")
    rows = [head] + [
        (
            for_terminal(o.name),  # its newline must not fake a 'result: match' line
            "x".join(map(str, o.shape)) or "scalar",
            f"{o.max_abs_err:.3e}",
            f"{o.max_rel_err:.3e}",
            f"{o.cosine:.6f}",
            f"{o.tolerance:.3e}",
            "yes" if o.ok else "NO",
        )
        for o in report.outputs
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"inputs: {for_terminal(report.inputs)}; pass when max abs err <= atol + rtol * max|reference| "
        f"(atol={report.atol:g}, rtol={report.rtol:g}); max rel err = max abs err / max|reference|"
    )
    lines.extend(f"note: {for_terminal(n)}" for n in report.notes)
    lines.extend(_vacuous_notes(report))
    failed = sum(not o.ok for o in report.outputs)
    verdict = "result: match" if report.ok else f"result: MISMATCH in {failed} output(s)"
    if not report.ok and report.tolerance_question:
        verdict += (f" at this tolerance; each at most {SPREAD_FACTOR:g}x the reference's own spread "
                    "(float rounding, not a wrong op): the tolerance is the question")
    lines.append(verdict)
    return "\n".join(lines)


def _vacuous_notes(report: ValidationReport) -> list[str]:
    """A note for every output whose reference is within the tolerance of zero: an output of
    zeros would pass too, so that comparison cannot fail (random weights can shrink the
    activations layer by layer to subnormals or zero)."""
    return [
        f"note: output {for_terminal(o.name)}: max|reference| {o.max_ref:.3e} <= its tolerance "
        f"{o.tolerance:.3e}, so zeros would pass: this comparison checks nothing (--per-kernel "
        "compares the layers before the values vanish)"
        for o in report.outputs
        if o.ok and o.max_ref <= o.tolerance
    ]


def _label(model: ModelArg, role: str) -> str:
    return str(model) if isinstance(model, str | Path) else f"<{role} model>"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _options(level: ort.GraphOptimizationLevel | None = None) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level or ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if level is not None:  # a timed or int8-kernel reference: one thread, as the C runs
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    # FATAL only: opfuse says why onnxruntime failed in its one line; ORT's own log of the error
    # would reach the terminal raw, with names from the model
    opts.log_severity_level = 4
    return opts


def reference_session(model: ModelArg, role: str, notes: list[str],
                      level: ort.GraphOptimizationLevel | None = None) -> ort.InferenceSession:
    """An onnxruntime session for validation (optimizations off, or ``level`` with one thread),
    upgrading an old opset when onnxruntime refuses it (quantize_static's opset-12 QDQ with
    per-axis DequantizeLinear, which onnxruntime cannot load at opset 12); the upgrade is
    recorded in ``notes``. Refusals are one line, never onnxruntime's exception."""
    label = _label(model, role)
    if isinstance(model, str | Path) and not Path(model).is_file():
        raise OpfuseError(f"{label}: no such file")
    source = str(model) if isinstance(model, str | Path) else model.SerializeToString()
    _check_limits(model, label)
    try:
        return ort.InferenceSession(source, _options(level), providers=["CPUExecutionProvider"])
    except Exception as exc:
        first = _first_line(exc)
        upgraded = _upgraded(model)
        if upgraded is None:
            raise OpfuseError(f"{label}: onnxruntime cannot load it: {first}") from None
    try:
        sess = ort.InferenceSession(upgraded, _options(level), providers=["CPUExecutionProvider"])
    except Exception:
        raise OpfuseError(f"{label}: onnxruntime cannot load it: {first}") from None
    notes.append(f"{label}: upgraded to opset {_UPGRADE_OPSET} to run in onnxruntime ({first})")
    return sess


def _check_limits(model: ModelArg, label: str) -> None:
    """The import's size and window limits, before onnxruntime allocates anything."""
    from opfuse.frontends.model_limits import check_model_limits
    from opfuse.frontends.onnx_frontend import check_external_bytes, check_external_locations

    try:
        proto = onnx.load(str(model), load_external_data=False) \
            if isinstance(model, str | Path) else model
    except Exception:  # unreadable: onnxruntime's own message says why
        return
    if isinstance(model, str | Path):  # onnxruntime would read any file the model names,
        # and each initializer on a shared region once more
        check_external_bytes(check_external_locations(proto, Path(model)), Path(model))
    check_model_limits(proto, label)


def _upgraded(model: ModelArg) -> bytes | None:
    """The model converted to a newer opset, when it is an old-opset model onnx can convert."""
    try:
        proto = onnx.load(str(model)) if isinstance(model, str | Path) else model
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
        if opset is None or opset >= _UPGRADE_OPSET:
            return None
        return onnx.version_converter.convert_version(proto, _UPGRADE_OPSET).SerializeToString()
    except Exception:
        return None


# onnxruntime's type names -> numpy ("float" is float32); anything else needs --inputs
_DTYPES = {
    f"tensor({n})": np.dtype(n if n != "float" else "float32")
    for n in ("float", "double", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")
}


def _dtype(arg: ort.NodeArg) -> np.dtype:
    if arg.type not in _DTYPES:
        raise OpfuseError(f"input '{arg.name}' has type {arg.type}; give its values with --inputs")
    return _DTYPES[arg.type]


def random_inputs(
    sess: ort.InferenceSession,
    seed: int = 0,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    model: ModelArg | None = None,
    ranges: Mapping[str, IndexRange] | None = None,
) -> dict[str, np.ndarray]:
    """Seeded random values for every input of ``sess``: shapes from ``input_shapes`` (the CLI's
    --input-shape) where given, else the model's, a leading symbolic dim bound to 1. With the
    ``model`` ``sess`` runs, integer inputs stay within what it indexes (opfuse/measure/validate/input_ranges.py;
    ``ranges``: those ranges, read before)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    spans = dict(ranges) if ranges is not None else index_ranges(model)
    for arg in sess.get_inputs():
        if input_shapes and arg.name in input_shapes:
            _put_random(feeds, arg, list(input_shapes[arg.name]), rng, spans.get(arg.name))
            continue
        shape = []
        for axis, dim in enumerate(arg.shape):
            if isinstance(dim, int) and dim >= 0:
                shape.append(dim)
            elif axis == 0:
                shape.append(1)
            else:
                raise OpfuseError(
                    f"input '{arg.name}' dim {axis} ('{dim}') is symbolic; bind it with "
                    "--input-shape or give input values with --inputs FILE.npz"
                )
        _put_random(feeds, arg, shape, rng, spans.get(arg.name))
    return feeds


def _put_random(feeds: dict[str, np.ndarray], arg: ort.NodeArg, shape: list[int],
                rng: np.random.Generator, span: IndexRange | None = None) -> None:
    dtype = _dtype(arg)
    refuse(f"input '{arg.name}' {shape}", tensor_bytes(shape, dtype.itemsize), "activation")
    if span is not None and dtype.kind in "iub":
        feeds[arg.name] = rng.integers(span.low, span.high, size=shape).astype(dtype)
    elif dtype.kind == "f":
        feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
    elif dtype.kind == "b":
        feeds[arg.name] = rng.integers(0, 2, size=shape).astype(dtype)
    else:
        feeds[arg.name] = rng.integers(0, 10, size=shape).astype(dtype)


def _npz_inputs(path: Path, sess: ort.InferenceSession) -> dict[str, np.ndarray]:
    return _given_inputs(read_npz(path), sess, str(path))


def _given_inputs(
    arrays: dict[str, np.ndarray], sess: ort.InferenceSession, where: str
) -> dict[str, np.ndarray]:
    return check_inputs(arrays, specs_of_session(sess.get_inputs(), _dtype), where)


def run_session(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], label: str,
                names: list[str] | None = None) -> list:
    """``sess.run``; onnxruntime refusing the model at run time (a shape its kernels reject) is
    one line naming ``label``."""
    try:
        return sess.run(names, feeds)
    except Exception as exc:
        raise OpfuseError(f"{label}: onnxruntime failed to run it: {_first_line(exc)}") from None
