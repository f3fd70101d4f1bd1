"""The runtime that is each source format's reference (docs/architecture.md, "Frontends and their
references"): onnxruntime with optimizations off for ONNX, TFLite Micro or LiteRT for .tflite.

A reference runner has ``name``, ``inputs`` and ``outputs`` (TensorSpec: name, shape, dtype, and the
quantization step of an integer or dequantized value), ``run(feeds) -> {name: array}`` and
``random_inputs(seed)``, all in the source model's own layout and dtype.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from opfuse.frontends.registry import TFLITE, frontend_for
from opfuse.measure.validate.input_ranges import index_ranges
from opfuse.measure.validate.ort import random_inputs, reference_session, run_session
from opfuse.measure.validate.tflite_reference import TensorSpec, TfliteReference


class OnnxReference:
    """onnxruntime (optimizations off) on an ONNX file: the ONNX frontend's reference."""

    name = "onnxruntime"
    integer = False  # its session runs the anchor groups in integers (c_int8.stepped_reference)

    def __init__(self, path: Path):
        self.path = path
        self.session = reference_session(path, "original", [])
        self._ranges: dict | None = None  # integer inputs' ranges (measure/validate/input_ranges.py)
        self.inputs = tuple(
            TensorSpec(a.name, tuple(d if isinstance(d, int) else 1 for d in a.shape),
                       _np_type(a.type), None)
            for a in self.session.get_inputs()
        )
        self.outputs = tuple(
            TensorSpec(a.name, (), _np_type(a.type), None) for a in self.session.get_outputs()
        )

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.outputs]
        return dict(zip(names, run_session(self.session, feeds, str(self.path), names),
                        strict=True))

    def random_inputs(self, seed: int) -> dict[str, np.ndarray]:
        if self._ranges is None:  # read once: int8 validation draws up to 100 trials
            self._ranges = index_ranges(self.path)
        return random_inputs(self.session, seed, ranges=self._ranges)


def _np_type(text: str) -> np.dtype:
    name = text.removeprefix("tensor(").removesuffix(")")
    return np.dtype("float32" if name == "float" else "float64" if name == "double" else name)


def reference_for(path: str | Path) -> OnnxReference | TfliteReference:
    """The reference runner of ``path``'s format, chosen by the frontend that reads it."""
    if frontend_for(path) is TFLITE:
        return TfliteReference(Path(path))
    return OnnxReference(Path(path))
