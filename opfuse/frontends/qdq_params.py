"""The parameters of one QuantizeLinear / DequantizeLinear node and fresh initializer names,
shared by the QDQ fold (``qdq.py``) and the fold of wide dequantized constants
(``qdq_constants.py``; docs/architecture.md, "int8 in the IR")."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.quant import QuantParams, make_params

DQ = "DequantizeLinear"


def node_params(node: ir.Node) -> tuple[QuantParams, ir.DataType] | None:
    """(params, integer dtype) of a QuantizeLinear/DequantizeLinear; None when not constant or
    blocked (block_size), which the fold then leaves alone."""
    if node.attributes.get_int("block_size", 0):
        return None
    scale = const(node.inputs[1])
    zp_value = node.inputs[2] if len(node.inputs) > 2 else None
    zp = const(zp_value)
    if scale is None or (zp_value is not None and zp is None):
        return None
    if scale.dtype.kind != "f" or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        bad = scale.ravel()[~(np.isfinite(scale.ravel()) & (scale.ravel() > 0))][:1] \
            if scale.dtype.kind == "f" else scale.ravel()[:1]
        raise OpfuseError(f"node '{node.name}' ({node.op_type}): quantization scale "
                          f"{float(bad[0]) if bad.size else scale!r} is not a finite number > 0")
    if zp_value is not None:
        dtype = zp_value.dtype
    elif node.op_type == DQ:
        dtype = node.inputs[0].dtype
    else:
        dtype = ir.DataType.UINT8  # QuantizeLinear's default output type
    data = node.inputs[0] if node.op_type == DQ else node.outputs[0]
    axis = None
    if scale.size > 1:
        rank = len(data.shape) if data.shape is not None else 0
        axis = node.attributes.get_int("axis", 1)
        axis = axis + rank if axis < 0 else axis
    return make_params(scale, 0 if zp is None else zp, axis), dtype


def fresh_initializer_name(graph: ir.Graph, base: str) -> str:
    """``base``, or ``base_2``, ``base_3`` ...: the first name no initializer of ``graph`` has."""
    name, i = base, 1
    while name in graph.initializers:
        i += 1
        name = f"{base}_{i}"
    return name
