"""The graph: onnx_ir's Model/Graph/Node/Value, plus the checks and inference every stage relies on."""

from __future__ import annotations

from opfuse.ir.shapes import (
    infer_shapes,
    is_static,
    require_static,
    unknown_size_producer,
    unknown_size_values,
)
from opfuse.ir.verify import verify

__all__ = [
    "infer_shapes",
    "is_static",
    "require_static",
    "unknown_size_producer",
    "unknown_size_values",
    "verify",
]
