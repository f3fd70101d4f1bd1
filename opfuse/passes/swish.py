"""Recognise SiLU / Swish written out as ``x * Sigmoid(x)`` as one ``Swish`` node (opset 24).

    Swish(x; alpha) = x * sigmoid(alpha * x)          (SiLU is alpha = 1)

Forms recognised (each with commuted Mul operands):

- ``Mul(x, Sigmoid(x))``                 -> Swish(x)
- ``Mul(x, Sigmoid(Mul(x, alpha)))``     -> Swish(x; alpha), alpha a float scalar constant

Why: exported SiLU reads ``x`` twice (the Sigmoid and the Mul), so the Conv producing ``x`` has two
readers and can neither take the activation as an epilogue nor join a cascade. As one op it is an
activation of the op table (``ops.py``), one epilogue of the anchor before it.

Only when the Sigmoid's output (and the inner Mul's) has no other reader: onnxscript's matcher
refuses a pattern whose intermediate value is used outside it. Float tensors only; in a quantized
graph the driver's ``quant_safe`` leaves the nodes alone (each would carry its own scale).
A model whose opset is below 24 has no ``Swish``: the ONNX backend and shape inference write the
node back out as Sigmoid and Mul (``ir/expand.py``; docs/architecture.md, "Transformer fusions").
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern

from opfuse.passes._driver import RulePass, rule_pass


def _is_float(x: ir.Value) -> bool:
    return x.dtype is not None and x.dtype.is_floating_point()


def _scalar(value: ir.Value | None) -> float | None:
    """The value of a constant with one element, else None."""
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    if tensor is None:
        return None
    array = np.asarray(tensor.numpy())
    return float(array.ravel()[0]) if array.size == 1 and array.dtype.kind == "f" else None


class SiLU(pattern.RewriteRuleClassBase):
    """x * Sigmoid(x) -> Swish(x)."""

    def pattern(self, op, x):
        return op.Mul(x, op.Sigmoid(x))

    def check(self, context, x, **_) -> MatchResult:
        result = MatchResult()
        return result if _is_float(x) else result.fail(f"{x.name}: not a float tensor")

    def rewrite(self, op, x: ir.Value, **_) -> ir.Value:
        return op.Swish(x)


class ScaledSwish(pattern.RewriteRuleClassBase):
    """x * Sigmoid(x * alpha) -> Swish(x; alpha)."""

    def pattern(self, op, x, alpha):
        return op.Mul(x, op.Sigmoid(op.Mul(x, alpha)))

    def check(self, context, x, alpha, **_) -> MatchResult:
        result = MatchResult()
        if not _is_float(x):
            return result.fail(f"{x.name}: not a float tensor")
        if _scalar(alpha) is None:
            return result.fail(f"{alpha.name}: not a float scalar constant")
        return result

    def rewrite(self, op, x: ir.Value, alpha: ir.Value, **_) -> ir.Value:
        return op.Swish(x, alpha=_scalar(alpha))


def swish_pass() -> RulePass:
    return rule_pass("fuse_swish", ("Mul",), [ScaledSwish.rule(), SiLU.rule()], commute=True)
