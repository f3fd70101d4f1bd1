"""The TFLite frontend: a .tflite file becomes an ONNX ModelProto in QDQ form, NCHW inside
(docs/architecture.md, "int8 in the IR" and "Layout of TFLite models").

The ``tflite`` package is imported only when a .tflite file is read, so ONNX-only use never needs it.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from opfuse.errors import OpfuseError

SUFFIXES = (".tflite",)


def read_tflite(path: str | Path) -> onnx.ModelProto:
    """The ONNX proto of a .tflite file (float: plain ONNX; quantized: QDQ with
    ``metadata_props['opfuse.rounding'] = 'tflite'``)."""
    model = read_model(path)
    from opfuse.frontends.tflite.convert import to_onnx

    return to_onnx(model)


def read_model(path: str | Path):
    """The decoded flatbuffer (reader.TfliteModel)."""
    try:
        import tflite  # noqa: F401
    except ImportError:
        raise OpfuseError(
            f"{path}: reading .tflite needs the 'tflite' package: pip install 'opfuse[tflite]'"
        ) from None
    from opfuse.frontends.tflite.reader import read_tflite_file

    return read_tflite_file(path)
