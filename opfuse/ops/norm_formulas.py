"""FLOPs of the normalization ops, counted over the function bodies of the ONNX operator spec
(onnx/docs/Operators.md: LayerNormalization-17, GroupNormalization-18/21, RMSNormalization-23;
InstanceNormalization-6's ``y = scale * (x - mean) / sqrt(variance + epsilon) + B``), one FLOP
per element of every elementwise op and reduction in the body, one per row for the scalar steps.

For N input elements normalized in R rows (groups of elements sharing one mean and variance):

- mean and variance: ReduceMean(X) N + R (the divide), Sub N, Mul N, ReduceMean N + R;
  the inverse deviation: Add epsilon, Sqrt, Reciprocal R each
- normalized, scaled, shifted: Mul N, Mul scale N, Add bias N

    LayerNormalization, InstanceNormalization, GroupNormalization: 7 N + 5 R (6 N + 5 R with no
    bias, which LayerNormalization's B may be)
    RMSNormalization (no mean): Mul (square) N, ReduceMean N + R, Add, Sqrt, Reciprocal R,
    Mul N, Mul scale N: 4 N + 4 R

The rows follow each op's definition: the dims before ``axis`` (LayerNormalization,
RMSNormalization; axis -1 by default), batch x channels (InstanceNormalization), batch x
``num_groups`` (GroupNormalization). Unknown dims count 0, as in ops.py.
"""

from __future__ import annotations

import math

import onnx_ir as ir


def _dims(node: ir.Node) -> list[int]:
    x = node.inputs[0] if node.inputs else None
    if x is None or x.shape is None:
        return []
    return [d if isinstance(d, int) else 0 for d in x.shape]


def _axis_rows(node: ir.Node, dims: list[int]) -> int:
    attr = node.attributes.get("axis")
    axis = attr.as_int() if attr is not None else -1
    axis = axis + len(dims) if axis < 0 else axis
    return math.prod(dims[:axis])


def _has_bias(node: ir.Node) -> bool:
    return len(node.inputs) > 2 and node.inputs[2] is not None


def layer_norm_flops(node: ir.Node) -> int:
    dims = _dims(node)
    if not dims:
        return 0
    return (7 if _has_bias(node) else 6) * math.prod(dims) + 5 * _axis_rows(node, dims)


def instance_norm_flops(node: ir.Node) -> int:
    dims = _dims(node)
    if len(dims) < 2:
        return 0
    return 7 * math.prod(dims) + 5 * dims[0] * dims[1]


def group_norm_flops(node: ir.Node) -> int:
    dims = _dims(node)
    attr = node.attributes.get("num_groups")
    if len(dims) < 2 or attr is None:
        return 0
    return 7 * math.prod(dims) + 5 * dims[0] * attr.as_int()


def rms_norm_flops(node: ir.Node) -> int:
    dims = _dims(node)
    if not dims:
        return 0
    return 4 * math.prod(dims) + 4 * _axis_rows(node, dims)
