"""Kernel classes for per-class compute efficiency (``[perf.efficiency]`` of a target file).

A kernel's class is that of its anchor (Conv, ConvTranspose, Gemm, MatMul) when it has one, else that
of its first op; an epilogue fused into the kernel does not change it:

- ``depthwise``: Conv with ``group > 1`` and one input channel per group (weight ``(C, 1, k...)``);
- ``conv1x1``: any other Conv whose kernel is 1 in every spatial dimension (a plain GEMM over pixels);
- ``conv``: any other Conv (k x k, grouped) and ConvTranspose;
- ``gemm``: Gemm, MatMul;
- ``pool``: MaxPool, AveragePool (a window slides over the input);
- ``reduce``: GlobalAveragePool, GlobalMaxPool, Reduce*, Softmax, LayerNormalization;
- ``elementwise``: unary and broadcasting arithmetic (Relu, Add, BatchNormalization, ...);
- ``movement``: injective data movement (Reshape, Concat, Pad, Transpose, ...);
- ``other``: anything opfuse does not know (OPAQUE ops).
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse import ops
from opfuse.ops import OpKind

_POOLS = ops.groups.POOLS
_GEMMS = ops.groups.MATRIX


def _conv_class(node: ir.Node) -> str:
    weight = node.inputs[1] if len(node.inputs) > 1 else None
    shape = None if weight is None or weight.shape is None else list(weight.shape)
    if shape is None or len(shape) < 3 or not all(isinstance(d, int) for d in shape):
        return "conv"  # a weight fed as a graph input may have a symbolic dim: no finer class
    group_attr = node.attributes.get("group")
    group = group_attr.as_int() if group_attr is not None else 1
    if group > 1 and shape[1] == 1:
        return "depthwise"
    if group == 1 and all(d == 1 for d in shape[2:]):
        return "conv1x1"
    return "conv"


def node_class(node: ir.Node) -> str:
    """The efficiency class of one node (see the module docstring)."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return "other"
    if op == "Conv":
        return _conv_class(node)
    if op == "ConvTranspose":
        return "conv"
    if op in _GEMMS:
        return "gemm"
    if op in _POOLS:
        return "pool"
    kind = ops.kind(node)
    if kind == OpKind.REDUCE:
        return "reduce"
    if kind in (OpKind.ELEMWISE, OpKind.BROADCAST):
        return "elementwise"
    if kind == OpKind.INJECTIVE:
        return "movement"
    return "other"


def kernel_class(members: list[ir.Node]) -> str:
    """The class of a kernel made of ``members`` (in schedule order): its anchor's, else its first op's."""
    if not members:
        return "other"
    anchor = next((n for n in members if ops.is_anchor(n)), members[0])
    return node_class(anchor)
