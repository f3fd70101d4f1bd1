"""``validate --backend c`` of a quantized model: the generated int8 C beside the source's own
reference (docs/architecture.md, "int8 in the IR"), through opfuse.validate_tflite's comparison
(differing elements and the largest difference in quantization steps, top-1 of classifiers).

* ``.tflite``: TFLite Micro's interpreter on the same file, fed the same buffers (the C takes and
  returns the source's layout and dtype, and its inputs and outputs keep the source's names).
  Bit-exact is the rule: ``steps`` 0.
* quantized ONNX: onnxruntime on the original model; within one quantization step passes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from opfuse.backends.c.emit import emit_c
from opfuse.backends.c.runner import CModel, build_shared
from opfuse.pipeline import CompileResult
from opfuse.validate import ValidationReport

TRIALS = 20


def validate_c_int8(result: CompileResult, *, fuse: bool = True, trials: int = TRIALS,
                    seed: int = 0, steps: float | None = None, reference=None,
                    outdir: Path | str | None = None) -> ValidationReport:
    """Emit and build the int8 C of ``result``; compare it on ``trials`` seeded inputs with
    ``reference`` (a runner as in opfuse.frontends.registry; the source's own by default)."""
    from opfuse.validate_tflite import validate_against_reference

    tflite = str(result.source).lower().endswith(".tflite")
    if steps is None:
        steps = 0 if tflite else 1
    with tempfile.TemporaryDirectory(prefix="opfuse-c8-") as tmp:
        folder = Path(outdir) if outdir is not None else Path(tmp) / "model"
        emit_c(result, folder, fuse=fuse)
        build_shared(folder)
        model = CModel(folder)

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return model.run(feeds)

        label = f"generated int8 C ({'fused' if fuse else 'unfused'})"
        return validate_against_reference(result.source, run, label=label, seed=seed,
                                          trials=trials, steps=steps, reference=reference)
