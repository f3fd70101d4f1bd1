"""Shared machinery of the layout passes (``transpose_*``): permutations, and rules the driver runs.

Notation used by every layout pass: ``y = Transpose(x, p)`` means ``y.shape[i] = x.shape[p[i]]``,
so axis ``i`` of ``y`` is axis ``p[i]`` of ``x``. A value in ``y``'s layout is moved into ``x``'s
layout by ``Transpose(., inverse(p))``; a per-channel quantization axis ``a`` becomes ``p[a]``.

A layout rule is not an onnxscript pattern: its inputs vary in number (Concat, Sum, Where) and a
Transpose read by several nodes may still move past one of them. ``LayoutRule.try_rewrite`` has the
signature of onnxscript's ``RewriteRule.try_rewrite`` and returns the same kind of delta, so the
driver in ``_driver.py`` applies and counts it like any other rule. ``match.nodes`` lists only the
nodes that die (the root and any Transpose nobody else reads); the others stay for their readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from opfuse.quant import QuantParams, get_quant, set_quant


@dataclass
class Match:
    nodes: list[ir.Node]
    outputs: list[ir.Value]


@dataclass
class Delta:
    match: Match
    new_nodes: list[ir.Node]
    new_outputs: list[ir.Value]
    new_initializers: list[ir.Value] = field(default_factory=list)


class LayoutRule:
    """Base: subclasses implement ``rewrite(graph, node) -> Delta | None``."""

    remove_nodes = True
    name = "layout"

    def try_rewrite(self, model, graph, node, **_) -> Delta | None:
        if node.graph is not graph:
            return None
        return self.rewrite(graph, node)

    def rewrite(self, graph: ir.Graph, node: ir.Node) -> Delta | None:
        raise NotImplementedError


def inverse(p: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(p)
    for i, j in enumerate(p):
        inv[j] = i
    return tuple(inv)


def is_identity(p: Sequence[int]) -> bool:
    return all(i == j for i, j in enumerate(p))


def perm_of(node: ir.Node) -> tuple[int, ...] | None:
    """The Transpose's permutation (its default, reversed axes, needs a known input rank)."""
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    attr = node.attributes.get("perm")
    if attr is not None:
        return tuple(int(i) for i in attr.as_ints())
    x = node.inputs[0]
    if x is None or x.shape is None:
        return None
    return tuple(range(len(x.shape) - 1, -1, -1))


def transpose_source(value: ir.Value | None) -> tuple[ir.Value, tuple[int, ...], ir.Node] | None:
    """(x, p, node) when ``value`` is ``Transpose(x, p)`` of the main graph."""
    if value is None:
        return None
    node = value.producer()
    if node is None:
        return None
    perm = perm_of(node)
    if perm is None or node.inputs[0] is None:
        return None
    return node.inputs[0], perm, node


def only_read_by(value: ir.Value, node: ir.Node) -> bool:
    """True when ``node`` is the only reader of ``value`` (so its producer dies with it)."""
    return not value.is_graph_output() and all(user is node for user, _ in value.uses())


def to_source_layout(dims: Sequence, p: Sequence[int]) -> list:
    """Dims (or anything per axis) given in ``y``'s layout, rearranged into ``x``'s."""
    out = [None] * len(p)
    for i, d in enumerate(dims):
        out[p[i]] = d
    return out


def permuted_shape(shape: ir.Shape | None, p: Sequence[int]) -> ir.Shape | None:
    if shape is None or len(shape) != len(p):
        return None
    return ir.Shape(to_source_layout(list(shape), p))


def moved_quant(params: QuantParams | None, p: Sequence[int], offset: int = 0) -> QuantParams | None:
    """Quantization parameters of a value moved from ``y``'s layout into ``x``'s: per tensor they
    are unchanged; a per-channel axis ``a`` (of a value ``offset`` ranks below ``y``) becomes
    ``p[a + offset]``."""
    if params is None or params.axis is None:
        return params
    rank = len(p)
    axis = (params.axis % (rank - offset)) + offset
    return QuantParams(params.scale, params.zero_point, p[axis])


def new_value(like: ir.Value, shape: ir.Shape | None, quant: QuantParams | None) -> ir.Value:
    value = ir.Value(shape=shape, type=like.type)
    set_quant(value, quant)
    return value


def transpose_node(x: ir.Value, p: Sequence[int], out: ir.Value, name: str) -> ir.Node:
    return ir.Node(
        "", "Transpose", [x], [ir.AttrInt64s("perm", list(p))], outputs=[out], name=name
    )


def copy_node(node: ir.Node, inputs: Sequence[ir.Value | None], out: ir.Value, **attrs) -> ir.Node:
    """``node`` again on new inputs, with ``attrs`` replacing its attributes of the same name."""
    merged = {k: v for k, v in node.attributes.items() if k not in attrs}
    merged.update(attrs)
    return ir.Node(
        node.domain, node.op_type, list(inputs), list(merged.values()), outputs=[out],
        name=node.name, version=node.version,
    )


def permuted_constant(
    value: ir.Value, rank: int, p: Sequence[int]
) -> tuple[ir.Value, ir.Value | None] | None:
    """A constant read in ``y``'s layout (rank ``rank`` after broadcasting), as the value to read in
    ``x``'s layout, and the new initializer (None when the constant needs no change: a scalar, or
    one number). None when it has more axes than ``y`` or is not a constant."""
    tensor = value.const_value
    if tensor is None:
        return None
    array = tensor.numpy()
    if array.ndim > rank:
        return None
    if array.size == 1:
        return value, None
    offset = rank - array.ndim
    full = array.reshape((1,) * offset + array.shape)
    moved = np.ascontiguousarray(np.transpose(full, inverse(p)))
    name = f"{value.name or 'const'}_perm"
    init = ir.Value(
        name=name, shape=ir.Shape(moved.shape), type=value.type, const_value=ir.Tensor(moved)
    )
    set_quant(init, moved_quant(get_quant(value), p, offset))
    return init, init


def existing_transpose(value: ir.Value, p: Sequence[int]) -> ir.Value | None:
    """The output of a live ``Transpose(value, p)`` already in the graph, if any (reusing it costs
    nothing; inserting a new one would)."""
    for user, _ in value.uses():
        if perm_of(user) == tuple(p) and user.graph is not None and user.outputs[0].uses():
            return user.outputs[0]
    return None


def rank_of(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None:
        return None
    return len(value.shape)


def is_one_element(value: ir.Value) -> bool:
    shape = value.shape
    return shape is not None and all(isinstance(d, int) and d == 1 for d in shape)


get_quant_of = get_quant  # re-exported for the rules: one import line
