"""One frontend per source format, chosen by file extension (docs/architecture.md, the frontends'
row): each reads its files into an ONNX proto. The runtime that is each format's reference runs
below the compiler, in ``opfuse.measure.validate.references``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from opfuse.frontends.onnx_frontend import read_onnx


def _read_tflite(path: Path) -> onnx.ModelProto:
    from opfuse.frontends.tflite import read_tflite

    return read_tflite(path)


@dataclass(frozen=True)
class Frontend:
    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Path], onnx.ModelProto]


ONNX = Frontend("onnx", (".onnx",), read_onnx)
TFLITE = Frontend("tflite", (".tflite",), _read_tflite)
FRONTENDS = (ONNX, TFLITE)


def frontend_for(path: str | Path) -> Frontend:
    """The frontend whose suffix ``path`` has; ONNX for any other name (its parser says more)."""
    suffix = Path(path).suffix.lower()
    return next((f for f in FRONTENDS if suffix in f.suffixes), ONNX)


def known_suffix(path: str | Path) -> bool:
    return any(Path(path).suffix.lower() in f.suffixes for f in FRONTENDS)
