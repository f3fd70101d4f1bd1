"""Recognise GELU written out elementwise as one ``Gelu`` node (opset 20 semantics).

    erf form:   Gelu(x)           = 0.5 * x * (1 + erf(x / sqrt(2)))
    tanh form:  Gelu(x; "tanh")   = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

Forms recognised (each with commuted Add/Mul operands):

- the argument of erf: ``Div(x, sqrt(2))`` or ``Mul(x, 1/sqrt(2))``;
- the argument of tanh: ``Mul(sqrt(2/pi), Add(x, Mul(0.044715, Pow(x, 3))))``, the cube also
  written ``Mul(Mul(x, x), x)``;
- the outer product in any association: ``(x * (1 + f)) * 0.5``, ``(x * 0.5) * (1 + f)``,
  ``x * ((1 + f) * 0.5)``.

Constants are matched as scalars within a relative 1e-4 (sqrt(2) and 0.044715 are not exact in
float32); another constant, another axis of association or an intermediate with a reader outside
the pattern leaves the nodes alone. The rule runs in the first phase of each round, before the
affine folds could absorb the ``/ sqrt(2)`` into a producing MatMul.

A recognised GELU is one activation (``ops.py``), so it is one epilogue of the anchor before it
whatever the target's ``max_chain``. A model whose opset is below 20 has no ``Gelu``: the ONNX
backend writes the node back out as the erf or tanh expression (``ir/expand.py``), and
the partition still counts it as one op (docs/architecture.md, "Transformer fusions").
"""

from __future__ import annotations

import math

import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern
from onnxscript.rewriter._ir_utils import is_singleton_value  # noqa: PLC2701 (no public helper for a constant operand\'s scalar; onnxscript pinned <0.8)

from opfuse.passes._driver import RulePass, rule_pass

SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715
RTOL = 1e-4

# How the outer product 0.5 * x * (1 + f) is associated.
_OUTER = ("x_times_sum_then_half", "half_x_times_sum", "x_times_half_sum")


def _outer(op, x, inner, one, half, shape: str):
    total = op.Add(inner, one)
    if shape == "x_times_sum_then_half":
        return op.Mul(op.Mul(x, total), half)
    if shape == "half_x_times_sum":
        return op.Mul(op.Mul(x, half), total)
    return op.Mul(x, op.Mul(total, half))


def _float_checks(result: MatchResult, x: ir.Value, expected) -> MatchResult:
    for value, want in expected:
        if not is_singleton_value(value, want, rtol=RTOL):
            return result.fail(f"{value.name if value is not None else '?'} is not {want:.6g}")
    if x.dtype is None or not x.dtype.is_floating_point():
        return result.fail(f"{x.name}: not a float tensor")
    return result


class ErfGelu(pattern.RewriteRuleClassBase):
    """0.5 * x * (1 + erf(x / sqrt(2))) -> Gelu(x)."""

    def __init__(self, shape: str, divide: bool) -> None:
        super().__init__(f"ErfGelu_{shape}_{'div' if divide else 'mul'}")
        self._shape, self._divide = shape, divide

    def pattern(self, op, x, scale, one, half):
        arg = op.Div(x, scale) if self._divide else op.Mul(x, scale)
        return _outer(op, x, op.Erf(arg), one, half, self._shape)

    def check(self, context, x, scale, one, half, **_) -> MatchResult:
        want = SQRT2 if self._divide else 1.0 / SQRT2
        return _float_checks(MatchResult(), x, ((scale, want), (one, 1.0), (half, 0.5)))

    def rewrite(self, op, x: ir.Value, **_) -> ir.Value:
        return op.Gelu(x)


class TanhGelu(pattern.RewriteRuleClassBase):
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> Gelu(x, approximate="tanh")."""

    def __init__(self, shape: str, power: bool) -> None:
        super().__init__(f"TanhGelu_{shape}_{'pow' if power else 'mul'}")
        self._shape, self._power = shape, power

    def pattern(self, op, x, three, cubic, k, one, half):
        cube = op.Pow(x, three) if self._power else op.Mul(op.Mul(x, x), x)
        arg = op.Mul(op.Add(x, op.Mul(cube, cubic)), k)
        return _outer(op, x, op.Tanh(arg), one, half, self._shape)

    def check(self, context, x, cubic, k, one, half, three=None, **_) -> MatchResult:
        expected = [(cubic, CUBIC), (k, SQRT_2_OVER_PI), (one, 1.0), (half, 0.5)]
        if self._power:
            expected.append((three, 3.0))
        return _float_checks(MatchResult(), x, expected)

    def rewrite(self, op, x: ir.Value, **_) -> ir.Value:
        return op.Gelu(x, approximate="tanh")


def gelu_pass() -> RulePass:
    rules = [ErfGelu.rule(s, d) for s in _OUTER for d in (True, False)]
    rules += [TanhGelu.rule(s, p) for s in _OUTER for p in (True, False)]
    return rule_pass("fuse_gelu", ("Mul",), rules, commute=True)
