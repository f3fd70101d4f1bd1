"""Emit the optimized model as ONNX: portable, or with onnxruntime's fused contrib ops (``ort``)."""

from __future__ import annotations

from opfuse.backends.onnx.emit import KERNELS_KEY, NODE_KERNEL_KEY, emit_onnx, read_kernels
from opfuse.backends.onnx.save import save_model

__all__ = ["KERNELS_KEY", "NODE_KERNEL_KEY", "emit_onnx", "read_kernels", "save_model"]
