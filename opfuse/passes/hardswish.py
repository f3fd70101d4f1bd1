"""Recognise hard-sigmoid and hard-swish written out elementwise.

    relu6(x + 3) / 6 = clip(x + 3, 0, 6) / 6 = max(0, min(1, x / 6 + 0.5)) = HardSigmoid(x; 1/6, 0.5)
    x * HardSigmoid(x; 1/6, 0.5) = HardSwish(x)

Forms recognised (each with commuted Add/Mul operands):

- ``Div(Clip(Add(x, 3), 0, 6), 6)``         -> HardSigmoid   (onnxscript)
- ``Div(Mul(Clip(Add(x, 3), 0, 6), x), 6)`` -> HardSwish     (onnxscript)
- ``Mul(HardSigmoid(x; 1/6, 0.5), x)``      -> HardSwish     (onnxscript)
- ``Mul(Clip(Add(x, 3), 0, 6), 1/6)``       -> HardSigmoid   (ours: multiply by the reciprocal)
- ``Mul(Mul(Clip(Add(x, 3), 0, 6), x), 1/6)`` -> HardSwish   (ours)

Constants are matched as scalars within a relative 1e-4 (1/6 is not exact in float32). These rules
run in the first phase of each round, before the affine folds, which would otherwise absorb the
``+ 3`` into a producing Conv's bias and hide the pattern.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern
from onnxscript.rewriter._ir_utils import is_singleton_value  # noqa: PLC2701 (onnxscript exports its rules only as instances; opfuse subclasses them: pinned <0.8)
from onnxscript.rewriter.rules.common._fuse_hardswish import (  # noqa: PLC2701 (onnxscript exports its rules only as instances; opfuse subclasses them: pinned <0.8)
    HardSigmoidFusion,
    HardSwishFusion,
    HardSwishFusionFromHardSigmoid,
)

from opfuse.passes._driver import RulePass, rule_pass


class _MulByReciprocal(pattern.RewriteRuleClassBase):
    def check(self, context, x, clip_min, clip_max, bias, factor, **_) -> MatchResult:
        result = MatchResult()
        expected = ((clip_min, 0.0), (clip_max, 6.0), (bias, 3.0), (factor, 1 / 6))
        for value, want in expected:
            if not is_singleton_value(value, want, rtol=1e-4):
                return result.fail(f"{value.name if value is not None else '?'} is not {want}")
        if x.dtype is None or not x.dtype.is_floating_point():
            return result.fail(f"{x.name}: not a float tensor")
        return result


class HardSigmoidMulFusion(_MulByReciprocal):
    def pattern(self, op, x, clip_min, clip_max, bias, factor):
        return op.Clip(op.Add(x, bias), clip_min, clip_max) * factor

    def rewrite(self, op, x: ir.Value, **_) -> ir.Value:
        return op.HardSigmoid(x, alpha=float(np.float32(1 / 6)), beta=0.5)


class HardSwishMulFusion(_MulByReciprocal):
    def pattern(self, op, x, clip_min, clip_max, bias, factor):
        return (op.Clip(op.Add(x, bias), clip_min, clip_max) * x) * factor

    def rewrite(self, op, x: ir.Value, **_) -> ir.Value:
        return op.HardSwish(x)


def hardswish_passes() -> list[RulePass]:
    return [
        rule_pass(
            "fuse_hardswish",
            ("Div", "Mul"),
            [
                HardSwishFusion.rule(),
                HardSwishMulFusion.rule(),
                HardSwishFusionFromHardSigmoid.rule(),
            ],
            commute=True,
        ),
        rule_pass(
            "fuse_hardsigmoid",
            ("Div", "Mul"),
            [HardSigmoidFusion.rule(), HardSigmoidMulFusion.rule()],
            commute=True,
        ),
    ]
