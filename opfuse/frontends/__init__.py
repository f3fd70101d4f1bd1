"""Read models into the IR. ONNX now; TFLite maps onto the same IR later."""

from __future__ import annotations

from opfuse.frontends.onnx_frontend import import_proto, load_onnx, parse_input_shapes, read_onnx

__all__ = ["import_proto", "load_onnx", "parse_input_shapes", "read_onnx"]
