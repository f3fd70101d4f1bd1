"""Move a Transpose past a reduction, remapping the reduced axes.

With ``y = Transpose(x, p)`` of rank ``r`` and axes ``A`` reduced:

    keepdims=1:  Reduce(y, A) = Transpose(Reduce(x, A'), p),     A' = {p[a] : a in A}
    keepdims=0:  Reduce(y, A) = Transpose(Reduce(x, A'), p'),

where for keepdims=0 the kept axes of ``y`` (``i`` not in ``A``, in order) are axes ``p[i]`` of
``x``; ``Reduce(x, A')`` keeps them in increasing order, so ``p'[k]`` is the position of
``p[i_k]`` among the sorted kept axes of ``x``. When ``p'`` is the identity no Transpose remains
(reducing every axis that was moved). Empty axes mean every axis unless ``noop_with_empty_axes``
is set (then the node is an identity and is left alone). Axes come from the attribute (older
opsets) or the constant second input, whichever the node uses. Applies to ReduceSum, ReduceMean,
ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp,
ReduceSumSquare.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.ir.values import const
from opfuse.passes._driver import RulePass
from opfuse.passes._layout import (
    Delta,
    LayoutRule,
    Match,
    copy_node,
    get_quant_of,
    is_identity,
    new_value,
    only_read_by,
    transpose_node,
    transpose_source,
)
from opfuse.passes._push import REDUCE_OPS, Operands, worth_moving


class PushTransposeReduce(LayoutRule):
    name = "PushTransposeReduce"

    def rewrite(self, graph, node):
        src = transpose_source(node.inputs[0] if node.inputs else None)
        if src is None or len(node.outputs) != 1:
            return None
        x, perm, t_node = src
        rank = len(perm)
        from_attr = "axes" in node.attributes
        if from_attr:
            axes = [int(a) for a in node.attributes["axes"].as_ints()]
        elif len(node.inputs) > 1 and node.inputs[1] is not None:
            array = const(node.inputs[1])
            if array is None:
                return None
            axes = [int(a) for a in array.reshape(-1)]
        else:
            axes = []
        if not axes:
            if node.attributes.get_int("noop_with_empty_axes", 0):
                return None
            axes = list(range(rank))
        reduced = sorted({a % rank for a in axes})
        moved_axes = sorted(perm[a] for a in reduced)
        keep = node.attributes.get_int("keepdims", 1)
        if keep:
            out_perm: tuple[int, ...] = perm
        else:
            kept_src = sorted(perm[i] for i in range(rank) if i not in reduced)
            out_perm = tuple(kept_src.index(perm[i]) for i in range(rank) if i not in reduced)
        dying = [t_node] if only_read_by(node.inputs[0], node) else []
        ops = Operands(perm, [], dying, [], 1, 0, 0)
        if not worth_moving(node, ops):
            return None
        inputs = [x, *node.inputs[1:]]
        inits: list[ir.Value] = []
        attrs = {}
        if from_attr:
            attrs["axes"] = ir.AttrInt64s("axes", moved_axes)
        else:
            value = ir.Value(
                name=f"{node.name}_axes_perm", shape=ir.Shape([len(moved_axes)]),
                type=ir.TensorType(ir.DataType.INT64),
                const_value=ir.Tensor(np.array(moved_axes, dtype=np.int64)),
            )
            inputs = [x, value, *node.inputs[2:]]
            inits.append(value)
        y = node.outputs[0]
        shape = None
        if y.shape is not None and len(y.shape) == len(out_perm):
            dims = [None] * len(out_perm)
            for i, d in enumerate(y.shape):
                dims[out_perm[i]] = d
            shape = ir.Shape(dims)
        quant = get_quant_of(y)
        if quant is not None and quant.axis is not None:
            return None  # a per-channel reduction output: not worth the bookkeeping
        if is_identity(out_perm):
            inner = new_value(y, y.shape, quant)
            moved = copy_node(node, inputs, inner, **attrs)
            return Delta(Match([*dying, node], [y]), [moved], [inner], inits)
        inner = new_value(y, shape, quant)
        moved = copy_node(node, inputs, inner, **attrs)
        out = new_value(y, y.shape, quant)
        back = transpose_node(inner, out_perm, out, f"{node.name}_transpose")
        return Delta(Match([*dying, node], [y]), [moved, back], [out], inits)


def reduce_push_pass() -> RulePass:
    return RulePass("push_transpose_reduce", REDUCE_OPS, (PushTransposeReduce(),))
