"""Shared facts about the linear ops a per-channel affine map can be folded into.

A linear op here is ``y = W * x + b`` with one output channel axis: Conv and ConvTranspose (axis 1),
Gemm and MatMul (the last axis). Folding ``y * s + t`` (s, t per output channel) into it gives
``W' = W * s`` (scaled along the output-channel axis of W) and ``b' = b * s + t``.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.ir.values import const
from opfuse.ops import groups

LINEAR_OPS = groups.ANCHORS  # the ops a per-channel scale folds into
FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def channel_vector(c: np.ndarray, rank: int, axis: int, channels: int) -> np.ndarray | None:
    """The ``(channels,)`` vector that constant ``c`` is along ``axis`` of a rank-``rank`` tensor.

    None when ``c`` varies along another axis, would raise the rank, or has the wrong length: then
    ``y op c`` is not a per-channel map and cannot be folded.
    """
    if c.ndim > rank:
        return None
    axis = axis % rank
    shape = (1,) * (rank - c.ndim) + tuple(c.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(c.reshape(-1), (channels,)).copy()


def out_channel_axis(node: ir.Node) -> int:
    return -1 if node.op_type in groups.MATRIX else 1


def out_channels(node: ir.Node, w: np.ndarray) -> int:
    if node.op_type == "Conv":
        return w.shape[0]
    if node.op_type == "ConvTranspose":
        return w.shape[1] * node.attributes.get_int("group", 1)
    if node.op_type == "Gemm":
        return w.shape[0] if node.attributes.get_int("transB", 0) else w.shape[1]
    return w.shape[1]  # MatMul with a 2-D right operand


def scale_weight(node: ir.Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``W`` scaled by ``s`` along its output channels (``s`` has one entry per channel)."""
    if node.op_type == "Conv":  # (Cout, Cin/group, k...)
        return w * s.reshape((-1,) + (1,) * (w.ndim - 1))
    if node.op_type == "ConvTranspose":  # (Cin, Cout/group, k...): channel g*Cout/g + j
        group = node.attributes.get_int("group", 1)
        cin, cout_g = w.shape[0], w.shape[1]
        grouped = w.reshape((group, cin // group, cout_g) + w.shape[2:])
        factor = s.reshape((group, 1, cout_g) + (1,) * (w.ndim - 2))
        return (grouped * factor).reshape(w.shape)
    if node.op_type == "Gemm" and node.attributes.get_int("transB", 0):  # (N, K)
        return w * s[:, None]
    return w * s[None, :]  # Gemm (K, N) or MatMul (K, N)


def linear_weights(node: ir.Node) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(W, effective bias or None) when W and the bias are constants, else None.

    Gemm's effective bias is ``beta * C`` (any shape that broadcasts to the output). MatMul has no
    bias input; W must be 2-D.
    """
    if len(node.inputs) < 2:
        return None
    w = const(node.inputs[1])
    if w is None or w.dtype.kind != "f":
        return None
    if node.op_type == "MatMul":
        return (w, None) if w.ndim == 2 else None
    if node.op_type == "Gemm" and w.ndim != 2:
        return None
    bias_value = node.inputs[2] if len(node.inputs) > 2 else None
    if bias_value is None:
        return w, None
    bias = const(bias_value)
    if bias is None:
        return None
    if node.op_type == "Gemm":
        bias = bias * np.asarray(node.attributes.get_float("beta", 1.0), dtype=bias.dtype)
    return w, bias


def gemm_attributes(node: ir.Node) -> dict[str, ir.Attr]:
    """Gemm's attributes without ``beta`` (folded into the new bias)."""
    return {k: v for k, v in node.attributes.items() if k != "beta"}


def emit_linear(
    op, node: ir.Node, x: ir.Value, w: np.ndarray, bias: np.ndarray | None, tag: str
) -> ir.Value:
    """A copy of linear ``node`` reading ``x`` with constant weight ``w`` and bias ``bias``.

    A MatMul that gains a bias becomes Gemm (legal: 2-D input, 2-D weight, float).
    """
    dtype = w.dtype
    w_name = node.inputs[1].name or "w"
    w_value = op.initializer(ir.Tensor(w.astype(dtype)), name=f"{w_name}_{tag}")
    inputs = [x, w_value]
    if bias is not None:
        inputs.append(op.initializer(ir.Tensor(bias.astype(dtype)), name=f"{w_name}_{tag}_bias"))
    if node.op_type == "MatMul":
        op_type, attrs = ("Gemm", {}) if bias is not None else ("MatMul", {})
    elif node.op_type == "Gemm":
        op_type, attrs = "Gemm", gemm_attributes(node)
    else:
        op_type, attrs = node.op_type, dict(node.attributes.items())
    return op.op(op_type, *inputs, _name=node.name, **attrs)
