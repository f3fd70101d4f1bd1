"""Move a Transpose past a Pad, permuting the pads.

    Pad(Transpose(x, p), pads) = Transpose(Pad(x, pads'), p)
    pads'[p[i]] = pads[i],  pads'[r + p[i]] = pads[r + i]      (begins, then ends; rank r)

Padding axis ``i`` of the transposed tensor is padding axis ``p[i]`` of ``x``; the pad value and
the mode (constant, reflect, edge, wrap) act per axis and are unchanged. With the optional ``axes``
input (opset 18) the axes are remapped instead, ``axes'[k] = p[axes[k]]``. The pads (and axes)
must be constants; opset < 11 Pads (pads as an attribute) are remapped the same way.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.ir.values import const
from opfuse.passes._driver import RulePass
from opfuse.passes._layout import LayoutRule, only_read_by, to_source_layout, transpose_source
from opfuse.passes._push import Operands, move_past, worth_moving


def _int_const(array: np.ndarray, name: str) -> ir.Value:
    return ir.Value(
        name=name, shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.INT64),
        const_value=ir.Tensor(array.astype(np.int64)),
    )


class PushTransposePad(LayoutRule):
    name = "PushTransposePad"

    def rewrite(self, graph, node):
        src = transpose_source(node.inputs[0] if node.inputs else None)
        if src is None:
            return None
        x, perm, t_node = src
        rank = len(perm)
        inputs = list(node.inputs)
        inits: list[ir.Value] = []
        attrs = {}
        if "pads" in node.attributes:  # opset < 11
            pads = list(node.attributes["pads"].as_ints())
            new = to_source_layout(pads[:rank], perm) + to_source_layout(pads[rank:], perm)
            attrs["pads"] = ir.AttrInt64s("pads", new)
        elif len(inputs) > 3 and inputs[3] is not None:  # explicit axes: remap them
            axes = const(inputs[3])
            if axes is None:
                return None
            moved = np.array([perm[int(a) % rank] for a in axes.reshape(-1)])
            inputs[3] = _int_const(moved, f"{node.name}_axes_perm")
            inits.append(inputs[3])
        else:
            pads = const(inputs[1]) if len(inputs) > 1 else None
            if pads is None or pads.size != 2 * rank:
                return None
            flat = [int(v) for v in pads.reshape(-1)]
            new = to_source_layout(flat[:rank], perm) + to_source_layout(flat[rank:], perm)
            inputs[1] = _int_const(np.array(new), f"{node.name}_pads_perm")
            inits.append(inputs[1])
        inputs[0] = x
        dying = [t_node] if only_read_by(node.inputs[0], node) else []
        ops = Operands(perm, inputs, dying, inits, 1, 0, 0)
        if not worth_moving(node, ops):
            return None
        return move_past(node, ops, **attrs)


def pad_push_pass() -> RulePass:
    return RulePass("push_transpose_pad", ("Pad",), (PushTransposePad(),))
