"""A Transpose that moves only size-1 axes is a Reshape.

    Transpose(x, p) = Reshape(x, shape(Transpose(x, p)))    when the axes of ``x`` that are not 1,
                                                           taken in the order p visits them, are
                                                           in increasing order

Row-major data depends only on the order of the axes longer than 1; a Transpose keeping that order
moves no element. A Reshape is a view (no data movement); when it then keeps the shape,
``remove_noop_reshape`` removes it. Needs ``x``'s static shape. Runs after the passes that move
Transposes (a Transpose that could still cancel with another is worth more as a Transpose).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.ir.values import static_dims
from opfuse.passes._driver import RulePass
from opfuse.passes._layout import Delta, LayoutRule, Match, get_quant_of, new_value, perm_of


class TransposeToReshape(LayoutRule):
    name = "TransposeToReshape"

    def rewrite(self, graph, node):
        perm = perm_of(node)
        shape = static_dims(node.inputs[0] if node.inputs else None)
        if perm is None or shape is None or len(shape) != len(perm):
            return None
        moved = [a for a in perm if shape[a] != 1]
        if moved != sorted(moved):
            return None
        quant = get_quant_of(node.outputs[0])
        if quant is not None and quant.axis is not None:
            return None  # the axis would have to be recomputed for the reshaped view
        y = node.outputs[0]
        target = np.array([shape[a] for a in perm], dtype=np.int64)
        const = ir.Value(
            name=f"{node.name}_shape", shape=ir.Shape([len(perm)]),
            type=ir.TensorType(ir.DataType.INT64), const_value=ir.Tensor(target),
        )
        out = new_value(y, y.shape, quant)
        new = ir.Node("", "Reshape", [node.inputs[0], const], outputs=[out], name=node.name)
        return Delta(Match([node], [y]), [new], [out], [const])


def reshape_pass() -> RulePass:
    return RulePass("transpose_to_reshape", ("Transpose",), (TransposeToReshape(),))
