"""Recognise RMSNorm written out elementwise as one ``RMSNormalization`` node (opset 23 semantics).

    RMSNorm(x; w, eps) = x / sqrt(mean(x^2 over the last axis) + eps) * w

Forms recognised (each with commuted Add/Mul operands), as Llama-style exports write it:

- the square: ``Pow(x, 2)`` or ``Mul(x, x)``;
- the mean: ``ReduceMean`` over exactly the last axis with ``keepdims = 1`` (axes as an attribute,
  opset < 18, or as a constant input);
- ``r = Sqrt(Add(mean, eps))`` with a positive scalar ``eps``, then ``Div(x, r)``,
  ``Mul(x, Reciprocal(r))`` or ``Mul(x, Div(1, r))``;
- the scale: ``Mul(., w)`` with ``w`` of shape ``[D]`` (``D`` the last dim of ``x``).

Any other axis, exponent or scale shape, or an intermediate read outside the pattern, leaves the
nodes alone. onnxscript's own rule (``rules/fusion/_rms_normalization.py``: axes as an input,
``Pow`` and ``Reciprocal``, optional Casts) runs first; ours adds the opset-17 attribute form, the
``Mul(x, x)`` square and the ``Div`` forms that exports also write. ``RMSNormalization(x, w, axis=-1, epsilon=eps)`` is then one reduction (``ops.py``);
a model whose opset is below 23 gets the expression back when written as ONNX
(``ir/expand.py``) and the C backend has a kernel for it (``backends/c/norms_add.py``).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern
from onnxscript.rewriter._ir_utils import get_singleton_value, is_singleton_value  # noqa: PLC2701 (no public helper for a constant operand\'s scalar; onnxscript pinned <0.8)
from onnxscript.rewriter.rules.fusion._rms_normalization import rms_normalization_rules  # noqa: PLC2701 (onnxscript exports its rules only from private modules; pinned <0.8)

from opfuse.passes._driver import RulePass, rule_pass

_SQUARE = ("pow", "mul")
_AXES = ("attribute", "input")
_DIVIDE = ("div", "reciprocal", "one_over")


class RMSNormFusion(pattern.RewriteRuleClassBase):
    def __init__(self, square: str, axes: str, divide: str) -> None:
        super().__init__(f"RMSNorm_{square}_{axes}_{divide}")
        self._square, self._axes, self._divide = square, axes, divide

    def pattern(self, op, x, two, axes, eps, one, w):
        sq = op.Pow(x, two) if self._square == "pow" else op.Mul(x, x)
        if self._axes == "input":
            mean = op.ReduceMean(sq, axes, _allow_other_attributes=True, _outputs=["mean"])
        else:
            mean = op.ReduceMean(sq, _allow_other_attributes=True, _outputs=["mean"])
        r = op.Sqrt(op.Add(mean, eps))
        if self._divide == "div":
            normed = op.Div(x, r)
        elif self._divide == "reciprocal":
            normed = op.Mul(x, op.Reciprocal(r))
        else:
            normed = op.Mul(x, op.Div(one, r))
        return op.Mul(normed, w)

    def check(self, context, x, eps, w, mean, two=None, axes=None, one=None, **_) -> MatchResult:
        result = MatchResult()
        if x.dtype is None or not x.dtype.is_floating_point() or x.shape is None:
            return result.fail(f"{x.name}: not a float tensor of known rank")
        rank = len(x.shape)
        if self._square == "pow" and not is_singleton_value(two, 2.0, rtol=1e-6):
            return result.fail("the exponent is not 2")
        if self._divide == "one_over" and not is_singleton_value(one, 1.0, rtol=1e-6):
            return result.fail("the numerator is not 1")
        why = _last_axis_mean(mean.producer(), axes, rank)
        if why:
            return result.fail(why)
        value = get_singleton_value(eps)
        if value is None or not float(value) > 0:
            return result.fail("epsilon is not a positive scalar constant")
        last = x.shape[rank - 1]
        if w.shape is None or tuple(w.shape) != (last,) or w.dtype != x.dtype:
            return result.fail(f"the scale '{w.name}' is not of shape [{last}]")
        return result

    def rewrite(self, op, x: ir.Value, w: ir.Value, eps: ir.Value, **_) -> ir.Value:
        epsilon = float(get_singleton_value(eps))
        return op.RMSNormalization(x, w, axis=-1, epsilon=epsilon)


def _last_axis_mean(node: ir.Node, axes: ir.Value | None, rank: int) -> str | None:
    keep = node.attributes.get("keepdims")
    if keep is not None and keep.as_int() != 1:
        return "ReduceMean drops the reduced axis"
    if axes is not None:
        arr = axes.const_value.numpy() if axes.const_value is not None else None
        got = None if arr is None else [int(a) for a in arr.ravel()]
    else:
        attr = node.attributes.get("axes")
        got = None if attr is None else list(attr.as_ints())
    if got is None or len(got) != 1 or got[0] % rank != rank - 1:
        return f"ReduceMean is not over the last axis alone (axes {got})"
    return None


def rmsnorm_pass() -> RulePass:
    # onnxscript's rule first (opset 18+ axes input, Pow + Reciprocal, Casts around the
    # normalisation: a half-precision model's stash type), then ours for the forms it does not take
    # (its rules are not commuted: onnxscript cannot commute a pattern with alternatives; they
    # take both orders of the final Mul themselves)
    ours = rule_pass("fuse_rmsnorm", ("Mul",), [
        RMSNormFusion.rule(s, a, d) for s in _SQUARE for a in _AXES for d in _DIVIDE
    ], commute=True)
    return RulePass(ours.name, ours.roots, (*rms_normalization_rules, *ours.rules))
