"""Fold a constant per-channel Mul/Add/Sub/Div after Conv/ConvTranspose/Gemm/MatMul into its weights.

With ``y = W * x + b`` and a constant ``c`` that is one number per output channel (after
broadcasting against ``y``; a scalar counts):

    y * c  ->  W' = W * c,   b' = b * c
    y / c  ->  W' = W / c,   b' = b / c          (Div by a constant is Mul by 1/c; c must be != 0)
    y + c  ->  W' = W,       b' = b + c
    y - c  ->  W' = W,       b' = b - c          (Sub is Add of the negation)
    c - y  ->  W' = -W,      b' = c - b          (note the sign of W)

``c / y`` is not affine in ``y`` and is left alone. Gemm's bias is ``beta * C``; ``beta`` is folded
into the new C and dropped. A MatMul whose bias would change becomes Gemm, which is legal only for
a 2-D input; on a higher-rank MatMul only Mul/Div fold (MatMul + Add is already its canonical form).

Refused, with the reason: weights or bias not constant, ``c`` not per output channel (it would
broadcast along another axis or raise the rank), ``y`` used by another node or a graph output (the
matcher refuses those), Div by zero. Weights shared with another node are copied, never changed.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern

from opfuse.ir.values import const, static_dims
from opfuse.passes._driver import RulePass, rule_pass
from opfuse.passes._linear import (
    LINEAR_OPS,
    channel_vector,
    emit_linear,
    linear_weights,
    out_channel_axis,
    out_channels,
    scale_weight,
)
from opfuse.quant import get_quant

ARITH_OPS = ("Mul", "Div", "Add", "Sub")


class FoldAffineIntoLinear(pattern.RewriteRuleClassBase):
    """``arith(linear(x, W, b), c)`` (or ``arith(c, linear(...))``) -> ``linear(x, W', b')``."""

    def __init__(self, linear: str, arith: str, const_left: bool = False) -> None:
        side = "Left" if const_left else ""
        super().__init__(name=f"Fold{side}{arith}Into{linear}")
        self.linear, self.arith, self.const_left = linear, arith, const_left
        self._plan: tuple[np.ndarray, np.ndarray] | None = None

    def pattern(self, op, x, c):
        lin = getattr(op, self.linear)(x, _allow_other_inputs=True, _outputs=["lin"])
        arith = getattr(op, self.arith)
        return arith(c, lin) if self.const_left else arith(lin, c)

    def check(self, context, x: ir.Value, c: ir.Value, lin: ir.Value) -> MatchResult:
        result = MatchResult()
        node = lin.producer()
        if get_quant(lin) is not None or get_quant(node.inputs[1]) is not None:
            return result.fail(f"{node.name}: quantized; folding would change its int8 weights' scales")
        weights = linear_weights(node)
        if weights is None:
            return result.fail(f"{node.name}: weights or bias are not constants")
        cv = const(c)
        if cv is None or cv.dtype != weights[0].dtype:
            return result.fail(f"{c.name} is not a constant of the weights' dtype")
        shape = static_dims(lin)
        if shape is None:
            return result.fail(f"{lin.name} has no static shape")
        channels = out_channels(node, weights[0])
        vec = channel_vector(cv, len(shape), out_channel_axis(node), channels)
        if vec is None:
            return result.fail(f"{c.name} is not one value per output channel of {node.name}")
        vec = vec.astype(np.float64)
        ones, zeros = np.ones(channels), np.zeros(channels)
        if self.arith == "Mul":
            plan = (vec, zeros)
        elif self.arith == "Div":
            if self.const_left or np.any(vec == 0):
                return result.fail("only y / c with c != 0 is affine")
            plan = (1.0 / vec, zeros)
        elif self.arith == "Add":
            plan = (ones, vec)
        else:  # Sub
            plan = (-ones, vec) if self.const_left else (ones, -vec)
        if node.op_type == "MatMul" and np.any(plan[1] != 0):
            x_shape = static_dims(x)
            if x_shape is None or len(x_shape) != 2:
                return result.fail(f"{node.name}: MatMul + bias stays (Gemm needs a 2-D input)")
        self._plan = plan
        return result

    def rewrite(self, op, x: ir.Value, c: ir.Value, lin: ir.Value) -> ir.Value:
        node = lin.producer()
        assert self._plan is not None
        scale, shift = self._plan
        w, bias = linear_weights(node)  # type: ignore[misc]
        new_w = scale_weight(node, w.astype(np.float64), scale)
        if bias is None:
            new_bias = shift if np.any(shift != 0) else None
        else:  # Gemm's C may be (M, N), (1, N), (N,) or a scalar: it broadcasts along N
            new_bias = bias.astype(np.float64) * scale + shift
        return emit_linear(op, node, x, new_w.astype(w.dtype), new_bias, "affine")


def affine_pass() -> RulePass:
    rules = []
    for linear in LINEAR_OPS:
        for arith in ARITH_OPS:
            rules.append(FoldAffineIntoLinear.rule(linear, arith))
            if arith in ("Mul", "Add", "Sub"):
                rules.append(FoldAffineIntoLinear.rule(linear, arith, const_left=True))
    return rule_pass("fold_affine_into_linear", ARITH_OPS, rules)
