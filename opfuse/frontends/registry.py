"""One frontend per source format, chosen by file extension (docs/architecture.md, the frontends'
row): each reads its files into an ONNX proto and names the runtime that is its reference.

A reference runner has ``name``, ``inputs`` and ``outputs`` (TensorSpec: name, shape, dtype, and the
quantization step of an integer or dequantized value), ``run(feeds) -> {name: array}`` and
``random_inputs(seed)``, all in the source model's own layout and dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from opfuse.frontends.onnx_frontend import read_onnx


def _read_tflite(path: Path) -> onnx.ModelProto:
    from opfuse.frontends.tflite import read_tflite

    return read_tflite(path)


def _tflite_reference(path: Path):
    from opfuse.measure.validate.tflite_reference import TfliteReference

    return TfliteReference(path)


class OnnxReference:
    """onnxruntime (optimizations off) on an ONNX file: the ONNX frontend's reference."""

    name = "onnxruntime"

    def __init__(self, path: Path):
        from opfuse.measure.validate.ort import reference_session
        from opfuse.measure.validate.tflite_reference import TensorSpec

        self.path = path
        self.session = reference_session(path, "original", [])
        self.inputs = tuple(
            TensorSpec(a.name, tuple(d if isinstance(d, int) else 1 for d in a.shape),
                       _np_type(a.type), None)
            for a in self.session.get_inputs()
        )
        self.outputs = tuple(
            TensorSpec(a.name, (), _np_type(a.type), None) for a in self.session.get_outputs()
        )

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from opfuse.measure.validate.ort import run_session

        names = [o.name for o in self.outputs]
        return dict(zip(names, run_session(self.session, feeds, str(self.path), names),
                        strict=True))

    def random_inputs(self, seed: int) -> dict[str, np.ndarray]:
        from opfuse.measure.validate.ort import random_inputs

        return random_inputs(self.session, seed)


def _np_type(text: str) -> np.dtype:
    name = text.removeprefix("tensor(").removesuffix(")")
    return np.dtype("float32" if name == "float" else "float64" if name == "double" else name)


@dataclass(frozen=True)
class Frontend:
    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Path], onnx.ModelProto]
    reference: Callable[[Path], object]


ONNX = Frontend("onnx", (".onnx",), read_onnx, OnnxReference)
TFLITE = Frontend("tflite", (".tflite",), _read_tflite, _tflite_reference)
FRONTENDS = (ONNX, TFLITE)


def frontend_for(path: str | Path) -> Frontend:
    """The frontend whose suffix ``path`` has; ONNX for any other name (its parser says more)."""
    suffix = Path(path).suffix.lower()
    return next((f for f in FRONTENDS if suffix in f.suffixes), ONNX)


def known_suffix(path: str | Path) -> bool:
    return any(Path(path).suffix.lower() in f.suffixes for f in FRONTENDS)
