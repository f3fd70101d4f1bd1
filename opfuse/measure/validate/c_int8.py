"""``validate --backend c`` of a quantized model: the generated int8 C beside the source's own
reference (docs/architecture.md, "int8 in the IR"), through opfuse.measure.validate.source's comparison
(differing elements and the largest difference in quantization steps, top-1 of classifiers).

* ``.tflite``: TFLite Micro's interpreter on the same file, fed the same buffers (the C takes and
  returns the source's layout and dtype, and its inputs and outputs keep the source's names).
  Bit-exact is the rule: ``steps`` 0.
* quantized ONNX: onnxruntime (ORT_DISABLE_ALL) on the original model with each
  ``DQ -> Conv/Gemm/MatMul [-> Relu/Clip] -> Q`` group computed as QLinearConv/QLinearMatMul
  define it, integer accumulation and one float32 requantization (integer_reference.py): the
  arithmetic the int8 C (rounding ``onnx``) is defined by, exact or one IEEE rounding per step,
  so the same on every CPU. Within one quantization step passes (a float op left between a DQ
  and a Q, Softmax or LayerNorm, is float on both sides). The plain QDQ run (float32 sums, so a
  value near half a step can round either way: 2 steps on vww_96 quantized by opfuse) and
  ORT_ENABLE_ALL's QLinear int8 kernels (which vary with the CPU: up to 55 steps on an AVX2 CPU
  without VNNI) are reported as notes, not judged.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from opfuse.backends.c.emit import emit_c
from opfuse.compiled import CompileResult
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.ort import ValidationReport

TRIALS = 20


def c_label(result: CompileResult, fused: bool, cascades: tuple[str, ...]) -> str:
    """What was built, read off the built C (``CEmitted`` or its manifest): its arithmetic (the
    model's own integers, or float32 for a float model, which also comes here when it is a
    .tflite) and the cascades it kept, never the options asked for."""
    from opfuse.quant import is_quantized

    kind = "int8" if is_quantized(result.optimized) else "float32"
    layout = "unfused" if not fused else (
        f"{len(cascades)} cascade{'s' if len(cascades) != 1 else ''}" if cascades
        else "fused, no cascades")
    return f"generated {kind} C ({layout})"


def validate_c_int8(result: CompileResult, *, fuse: bool = True, trials: int = TRIALS,
                    seed: int = 0, steps: float | None = None, reference=None,
                    outdir: Path | str | None = None, cascades: bool = True,
                    informative: bool = True) -> ValidationReport:
    """Emit and build the int8 C of ``result``; compare it on ``trials`` seeded inputs with
    ``reference`` (a runner as in opfuse.frontends.registry; the source's own by default).
    ``cascades`` false: run the partition's cascades layer by layer (opfuse/backends/c/cascade.py).
    ``informative``: for quantized ONNX judged against its own reference, also note the distance
    from ORT_ENABLE_ALL (a caller's ``reference`` gets no such note: its source may be no file)."""
    from opfuse.measure.validate.source import validate_against_reference

    tflite = str(result.source).lower().endswith(".tflite")
    if steps is None:
        steps = 0 if tflite else 1
    informative = informative and reference is None and not tflite
    if reference is None and not tflite:
        reference = stepped_reference(result)
    with tempfile.TemporaryDirectory(prefix="opfuse-c8-") as tmp:
        folder = Path(outdir) if outdir is not None else Path(tmp) / "model"
        emitted = emit_c(result, folder, fuse=fuse, cascades=cascades)
        build_shared(folder)
        model = CModel(folder)

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return model.run(feeds)

        label = c_label(result, emitted.fused, emitted.cascades)
        report = validate_against_reference(result.source, run, label=label, seed=seed,
                                            trials=trials, steps=steps, reference=reference)
        if informative:
            report = with_enable_all_note(report, result, run, seed, trials)
            if getattr(reference, "integer", False):
                report = with_float_qdq_note(report, result, run, seed, trials)
        if not tflite and not report.ok:
            report = replace(report, notes=report.notes + (COMPOUNDS,))
        return report


# docs/architecture.md, "int8 in the IR": why a deep QDQ model is judged kernel by kernel
COMPOUNDS = ("a whole-model difference over 1 step compounds across layers (one float rounding "
             "difference flips a tie before a QuantizeLinear, and the flip travels on): "
             "--per-kernel feeds each kernel the reference's inputs and judges each within 1 step")


def with_enable_all_note(report: ValidationReport, result: CompileResult, run, seed: int,
                         trials: int) -> ValidationReport:
    """``report`` with one note per output: the largest difference from onnxruntime's
    ORT_ENABLE_ALL int8 kernels (informative: those kernels differ between CPUs)."""
    from opfuse.measure.validate.source import validate_against_reference

    other = validate_against_reference(result.source, run, label="", seed=seed, trials=trials,
                                       steps=1, reference=stepped_reference(result, enable_all=True))
    notes = tuple(f"informative: {o.name}: {o.max_abs_err:g} quantization steps from onnxruntime "
                  "ORT_ENABLE_ALL (its QLinear kernels, which vary with the CPU; not judged)"
                  for o in other.outputs)
    return replace(report, notes=report.notes + notes)


def with_float_qdq_note(report: ValidationReport, result: CompileResult, run, seed: int,
                        trials: int) -> ValidationReport:
    """``report`` with one note per output: the largest difference from onnxruntime's plain
    ORT_DISABLE_ALL run of the QDQ model (float32 sums; informative: ties round either way)."""
    from opfuse.measure.validate.source import validate_against_reference

    other = validate_against_reference(result.source, run, label="", seed=seed, trials=trials,
                                       steps=1, reference=stepped_reference(result, integer=False))
    notes = tuple(f"informative: {o.name}: {o.max_abs_err:g} quantization steps from the QDQ "
                  "model run as written (Q/DQ around float32 ops: a sum near half a step may "
                  "round the other way; not judged)" for o in other.outputs)
    return replace(report, notes=report.notes + notes)


INTEGER_NAME = ("onnxruntime (ORT_DISABLE_ALL) on the QDQ model with each DQ->Conv/Gemm/MatMul->Q "
                "group as QLinearConv/QLinearMatMul define it: integer sums, one float32 "
                "requantization, half to even (the int8 C's arithmetic; the same on every CPU)")


def stepped_reference(result: CompileResult, enable_all: bool = False, integer: bool = True):
    """onnxruntime on the original ONNX, with each float output that a DequantizeLinear writes
    measured in that quantizer's steps (as TFLite's reference does for DEQUANTIZE): at
    ORT_DISABLE_ALL with the anchor groups in integers (``integer``, integer_reference.py: what
    the int8 C is judged against), as written (not ``integer``), or at ORT_ENABLE_ALL."""
    from dataclasses import replace

    import onnxruntime as ort

    from opfuse.measure.validate.ort import reference_session
    from opfuse.measure.validate.references import OnnxReference
    from opfuse.quant import get_quant

    ref = OnnxReference(Path(result.source))
    if enable_all:  # ORT_ENABLE_ALL turns QDQ into its QLinear int8 kernels
        ref.session = reference_session(Path(result.source), "original", [],
                                        ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        ref.name = "onnxruntime (ORT_ENABLE_ALL: its QLinear int8 kernels)"
    else:  # the reference's own session, optimizations off: Q/DQ around float ops
        ref.name = "onnxruntime (ORT_DISABLE_ALL: Q/DQ around float ops, as written)"
        if integer:
            _integer_session(ref)
    steps: dict[str, float] = {}
    for value in result.optimized.graph.outputs:
        node = value.producer()
        if node is not None and node.op_type == "DequantizeLinear":
            q = get_quant(node.inputs[0])
            if q is not None and q.scale.size == 1:
                steps[value.name] = float(q.scale[0])
    ref.outputs = tuple(replace(o, scale=steps.get(o.name, o.scale)) for o in ref.outputs)
    return ref


def _integer_session(ref) -> None:  # noqa: ANN001 (OnnxReference)
    """Point ``ref`` at the integer form of its model (integer_reference.py), if it has an anchor
    group to rewrite; ``ref.integer`` says it does."""
    import onnx

    from opfuse.measure.validate.integer_reference import integer_reference
    from opfuse.measure.validate.ort import reference_session

    rewrite = integer_reference(onnx.load(str(ref.path)))
    if rewrite.rewritten:
        ref.session = reference_session(rewrite.proto, "integer reference", [])
        ref.name = INTEGER_NAME + (f"; {len(rewrite.kept)} group(s) left in float32"
                                   if rewrite.kept else "")
        ref.integer = True
