"""Dequantized constants the QDQ fold leaves behind (docs/architecture.md, "int8 in the IR").

A ``DequantizeLinear`` of a constant that is not 8-bit (quantize_static's int32 bias) is folded
into its float value when a float op still reads it after ``fold_qdq``: exporters deduplicate
equal initializers, so one bias can also feed LayerNormalization or another float op through
Identity nodes, and the int8 C has no kernel that dequantizes int32. ONNX defines the value as
``(x - zero_point) * scale``; numpy computes it once here, in float32 as onnxruntime does.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.frontends.qdq_params import DQ, fresh_initializer_name, node_params
from opfuse.ir.values import const

_EIGHT_BIT = (ir.DataType.INT8, ir.DataType.UINT8)


def fold_wide_constant_dequantize(graph: ir.Graph) -> int:
    """Replace each DQ of a constant wider than 8 bits by a float initializer; return how many."""
    folded = 0
    for node in list(graph):
        if node.op_type != DQ or node.domain not in ("", "ai.onnx"):
            continue
        x = node.inputs[0]
        data, found = const(x), node_params(node)
        if data is None or found is None or x.dtype in _EIGHT_BIT:
            continue
        params = found[0]
        real = _dequantized(np.asarray(data), params.scale, params.zero_point, params.axis)
        out = node.outputs[0]
        value = ir.Value(name=fresh_initializer_name(graph, f"{x.name}_real"), shape=ir.Shape(real.shape),
                         type=ir.TensorType(ir.DataType.FLOAT), const_value=ir.tensor(real))
        graph.register_initializer(value)
        out.replace_all_uses_with(value, replace_graph_outputs=False)
        if not out.uses() and not out.is_graph_output():
            graph.remove(node, safe=True)
            folded += 1
    return folded


def _dequantized(data: np.ndarray, scale: np.ndarray, zero_point: np.ndarray,
                 axis: int | None) -> np.ndarray:
    shape = [1] * data.ndim
    if axis is not None and scale.size > 1:
        shape[axis] = scale.size
    s = scale.astype(np.float32).reshape(shape if scale.size > 1 else ())
    z = zero_point.astype(np.float32).reshape(shape if zero_point.size > 1 else ())
    return ((data.astype(np.float32) - z) * s).astype(np.float32)
