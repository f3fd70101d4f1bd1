"""Compare a model opfuse produced (ONNX run in onnxruntime, or any runner) with the source
frontend's own reference: TFLite Micro for quantized .tflite, LiteRT for float .tflite.

Inputs are seeded random values in the source's layout and dtype (int8 over its whole range,
float standard normal), the same feed for both sides; the graph inputs of the emitted ONNX keep
the TFLite names, NHWC shapes and dtypes, so no mapping is needed (docs/architecture.md).

Per output, over all trials:

* integer outputs (and float outputs made by DEQUANTIZE, measured in their source's steps): the
  number of differing elements and the largest difference in quantization steps; ok when that is
  at most ``steps``;
* float outputs: the usual rule of opfuse.measure.validate.ort (max abs err <= atol + rtol * max|reference|);
* a classifier output (shape (1, N), N >= 2, not an input's shape) also reports top-1 agreement.

onnxruntime evaluates QDQ in float with round-half-to-even, TFLite Micro in fixed point, so the
emitted ONNX of an int8 model is close, not bit-exact: ``steps`` is the allowance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opfuse.errors import OpfuseError
from opfuse.measure.validate.ort import ModelArg, OutputCheck, ValidationReport, compare, cosine
from opfuse.measure.validate.reference_spread import spread_notes

ONNX_STEPS = 32  # default allowance of the emitted ONNX: 1/8 of the int8 range


@dataclass
class _Tally:
    elements: int = 0
    differ: int = 0
    steps: float = 0.0
    top1: int = 0
    trials: int = 0


def validate_against_reference(
    source: str | Path,
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    *,
    label: str,
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    trials: int = 10,
    steps: float = ONNX_STEPS,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    reference=None,
) -> ValidationReport:
    """Run ``run`` (feeds by name -> outputs by name) beside ``source``'s reference (a runner of
    opfuse.measure.validate.references, made here unless given)."""
    from opfuse.measure.validate.references import reference_for

    ref = reference or reference_for(source)
    feeds_list = [dict(inputs)] if inputs is not None else [
        ref.random_inputs(seed + k) for k in range(trials)
    ]
    tallies = {o.name: _Tally() for o in ref.outputs}
    wanted: list[dict[str, np.ndarray]] = []
    floats: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {o.name: [] for o in ref.outputs}
    for feeds in feeds_list:
        want = ref.run(feeds)
        wanted.append(want)
        got = run(feeds)
        for spec in ref.outputs:
            if spec.name not in got:
                raise OpfuseError(f"{label} has no output '{spec.name}' (the source's output)")
            a, b = np.asarray(want[spec.name]), np.asarray(got[spec.name])
            if a.shape != b.shape:
                raise OpfuseError(
                    f"output '{spec.name}': shape {list(a.shape)} in {ref.name}, "
                    f"{list(b.shape)} in {label}"
                )
            floats[spec.name].append((a, b))
            t = tallies[spec.name]
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            if spec.dtype.kind == "f" and spec.scale:
                diff = np.round(diff / spec.scale, 3)
            t.elements += a.size
            t.differ += int(np.count_nonzero(diff))
            t.steps = max(t.steps, float(diff.max(initial=0.0)))
            t.trials += 1
            t.top1 += int(np.argmax(a) == np.argmax(b))
    checks, notes = [], []
    for spec in ref.outputs:
        t = tallies[spec.name]
        pairs = floats[spec.name]
        ref_all = np.concatenate([a.ravel() for a, _ in pairs])
        out_all = np.concatenate([b.ravel() for _, b in pairs])
        quantized = spec.dtype.kind in "iu" or bool(spec.scale)
        if quantized:
            checks.append(OutputCheck(
                name=spec.name, shape=tuple(pairs[0][0].shape), max_abs_err=t.steps,
                max_rel_err=t.steps / 255.0, cosine=cosine(ref_all, out_all),
                max_ref=_largest_in_steps(ref_all, spec), tolerance=float(steps),
                ok=t.steps <= steps,
            ))
            notes.append(
                f"{spec.name}: {t.differ} of {t.elements} elements differ, largest difference "
                f"{t.steps:g} quantization steps (allowed {steps:g})"
            )
        else:
            checks.append(compare(spec.name, ref_all, out_all, rtol, atol))
            checks[-1] = OutputCheck(**{**checks[-1].__dict__, "shape": tuple(pairs[0][0].shape)})
        if _classifier(spec, ref.inputs):
            notes.append(f"{spec.name}: top-1 agreement {t.top1}/{t.trials}")
    source_text = "given arrays" if inputs is not None else (
        f"random (seeds {seed}..{seed + len(feeds_list) - 1}), source layout and dtype")
    notes.insert(0, f"reference: {ref.name} on {source}; compared: {label}")
    floats_failed = [c for c, spec in zip(checks, ref.outputs, strict=True)
                     if not c.ok and spec.dtype.kind == "f" and not spec.scale]
    spread, within = spread_notes(ref, feeds_list, wanted, floats_failed, label)
    notes.extend(spread)
    return ValidationReport(tuple(checks), rtol, atol, source_text, tuple(notes),
                            tolerance_question=within and len(floats_failed) == sum(
                                not c.ok for c in checks))


def _largest_in_steps(values: np.ndarray, spec) -> float:
    """max |reference| in the unit its tolerance is in: quantization steps (a dequantized float
    output's values over its scale), so "an output of zeros would pass" is decided in one unit."""
    largest = float(np.abs(values.astype(np.float64)).max(initial=0.0))
    return largest / spec.scale if spec.dtype.kind == "f" and spec.scale else largest


def _classifier(spec, inputs) -> bool:
    """A (1, N) output, N >= 2, unlike every input's shape (an autoencoder's is not a class)."""
    shape = tuple(spec.shape)
    return (len(shape) == 2 and shape[0] == 1 and shape[1] >= 2
            and all(tuple(i.shape) != shape for i in inputs))


def validate_onnx_against_source(
    source: str | Path, optimized: ModelArg, **kwargs
) -> ValidationReport:
    """``optimized`` (ONNX) in onnxruntime, optimizations off, beside ``source``'s reference."""
    from opfuse.measure.validate.ort import reference_session
    from opfuse.measure.validate.references import reference_for

    reference = reference_for(source)  # the source's errors first
    sess = reference_session(optimized, "optimized", [])
    names = [o.name for o in sess.get_outputs()]
    label = str(optimized) if isinstance(optimized, str | Path) else "the emitted ONNX"

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        wanted = {i.name: feeds[i.name] for i in sess.get_inputs() if i.name in feeds}
        missing = [i.name for i in sess.get_inputs() if i.name not in feeds]
        if missing:
            raise OpfuseError(f"{label} reads input '{missing[0]}', which the source lacks")
        try:
            return dict(zip(names, sess.run(names, wanted), strict=True))
        except Exception as exc:
            raise OpfuseError(f"{label}: onnxruntime failed to run it: {exc}") from None

    return validate_against_reference(
        source, run, label=f"onnxruntime on {label}", reference=reference, **kwargs
    )


def validate_c_against_source(
    result, *, fuse: bool = True, planner: str = "greedy-inplace",
    inputs: Mapping[str, np.ndarray] | None = None, seed: int = 0, trials: int = 20,
    steps: float = 0, rtol: float = 1e-4, atol: float = 1e-4, outdir: str | Path | None = None,
    cascades: bool = True,
) -> ValidationReport:
    """The generated C of ``result`` (a CompileResult of a .tflite) beside the source's reference;
    an int8 output must be bit-exact by default (``steps`` 0)."""
    import tempfile

    from opfuse.backends.c.emit import emit_c
    from opfuse.measure.run.host import CModel, build_shared

    with tempfile.TemporaryDirectory(prefix="opfuse-c-") as tmp:
        folder = Path(outdir) if outdir is not None else Path(tmp) / "model"
        emit_c(result, folder, fuse=fuse, planner=planner, cascades=cascades)
        build_shared(folder)
        model = CModel(folder)
        return validate_against_reference(
            result.source, model.run, label=f"generated C ({'fused' if fuse else 'unfused'})",
            inputs=inputs, seed=seed, trials=trials, steps=steps, rtol=rtol, atol=atol,
        )
