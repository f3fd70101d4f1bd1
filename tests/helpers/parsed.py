"""Small float graphs written in ONNX's text syntax (``onnx.parser``) with numpy initializers, for
the C kernel tests that check one emitter against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.parser

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'


def normal(*shape: int, seed: int = 0) -> np.ndarray:
    """Seeded standard-normal float32 values of ``shape``."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def parsed_model(text: str, **arrays: np.ndarray) -> onnx.ModelProto:
    """The graph ``text`` at opset 17, with ``arrays`` as its initializers by name."""
    model = onnx.parser.parse_model(f"{OPSET} {text}")
    for name, arr in arrays.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    return model
