"""Fold inference BatchNormalization into the linear op that produces its input.

    BN(y) = gamma * (y - mean) / sqrt(var + eps) + beta = y * s + t,
    s = gamma / sqrt(var + eps),   t = beta - mean * s

so with ``y = W * x + b``:  ``W' = W * s`` (along W's output-channel axis),  ``b' = b * s + t``.

- Conv: W is (Cout, Cin/group, k...); s scales axis 0 (grouped and depthwise alike).
- ConvTranspose: W is (Cin, Cout/group, k...); output channel ``g * Cout/group + j`` reads
  ``W[g * Cin/group : (g+1) * Cin/group, j]``, so s is applied per group on axis 1.
- Gemm: ``alpha * A' B' + beta * C``; s scales B's N axis (axis 0 with transB, else 1) and
  ``b' = (beta * C - mean) * s + beta_bn`` with the Gemm's ``beta`` dropped.
- MatMul with a constant 2-D right operand and a 2-D output (BN's channel axis 1 is then the last
  axis, the weight's column): ``Gemm(x, W * s, t)``. A higher-rank MatMul normalises a different
  axis than W's columns and cannot absorb the BN.

Conv, ConvTranspose and Gemm use onnxscript's rules (``fuse_batchnorm_into_*``), checked here
against the cases above (see tests/passes/test_batchnorm.py) and guarded for what they do not
check: training-mode BN, an omitted optional bias, BN parameters of another dtype than the weights
(the folded weights would change dtype). MatMul is ours. Folding needs the weights and the BN
parameters to be constants; otherwise the BN is left for the partitioner to report.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern
from onnxscript.rewriter.rules.common import _fuse_batchnorm as lib  # noqa: PLC2701 (onnxscript exports its rules only as instances; opfuse subclasses them: pinned <0.8)

from opfuse.ir.values import const, static_dims
from opfuse.passes._driver import RulePass, rule_pass
from opfuse.passes._linear import emit_linear
from opfuse.quant import get_quant


def bn_scale_shift(bn: ir.Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(s, t) with BN(y) = y * s + t per channel, in float64; None unless foldable."""
    if bn.attributes.get_int("training_mode", 0) or len(bn.inputs) != 5:
        return None
    params = [const(v) for v in bn.inputs[1:]]
    if any(p is None or p.ndim != 1 for p in params):
        return None
    gamma, beta, mean, var = (p.astype(np.float64) for p in params)  # type: ignore[union-attr]
    eps = bn.attributes.get_float("epsilon", 1e-5)
    s = gamma / np.sqrt(var + eps)
    return s, beta - mean * s


def _guard(x: ir.Value, inbound_out: ir.Value, batchnorm_out: ir.Value) -> MatchResult:
    # Cheap checks on metadata only: the library's check and rewrite read the tensors again.
    result = MatchResult()
    bn, lin = batchnorm_out.producer(), inbound_out.producer()
    params = bn.inputs[1:]
    if bn.attributes.get_int("training_mode", 0) or len(params) != 4:
        return result.fail(f"{bn.name}: training mode")
    if any(v is None or v.const_value is None or len(v.const_value.shape) != 1 for v in params):
        return result.fail(f"{bn.name}: non-constant parameters")
    if any(v is None for v in lin.inputs[1:]):
        return result.fail(f"{lin.name}: an omitted optional input")
    w = lin.inputs[1]
    if get_quant(w) is not None or get_quant(inbound_out) is not None:
        return result.fail(f"{lin.name}: quantized; folding would change its int8 weights' scales")
    if w.const_value is None:
        return result.fail(f"{lin.name}: non-constant weights")
    if any(v.const_value.dtype != w.const_value.dtype for v in params):
        return result.fail(f"{bn.name}: parameters' dtype differs from the weights'")
    return result


class FuseBatchNormIntoConv(lib.FuseBatchNormIntoConv):
    def check(self, context, x, inbound_out, batchnorm_out) -> MatchResult:
        guard = _guard(x, inbound_out, batchnorm_out)
        return guard if not guard else super().check(context, x, inbound_out, batchnorm_out)


class FuseBatchNormIntoConvTranspose(lib.FuseBatchNormIntoConvTranspose):
    def check(self, context, x, inbound_out, batchnorm_out) -> MatchResult:
        guard = _guard(x, inbound_out, batchnorm_out)
        return guard if not guard else super().check(context, x, inbound_out, batchnorm_out)


class FuseBatchNormIntoGemm(lib.FuseBatchNormIntoGemm):
    def check(self, context, x, inbound_out, batchnorm_out) -> MatchResult:
        guard = _guard(x, inbound_out, batchnorm_out)
        return guard if not guard else super().check(context, x, inbound_out, batchnorm_out)


class FuseBatchNormIntoMatMul(pattern.RewriteRuleClassBase):
    """``BN(MatMul(x, W))`` with a 2-D output -> ``Gemm(x, W * s, t)``."""

    def pattern(self, op, x, w):
        return op.BatchNormalization(
            op.MatMul(x, w, _outputs=["mm"]), _allow_other_inputs=True, _outputs=["bn"]
        )

    def check(self, context, x: ir.Value, w: ir.Value, mm: ir.Value, bn: ir.Value) -> MatchResult:
        result = _guard(x, mm, bn)
        if not result:
            return result
        weight = const(w)
        if weight is None or weight.ndim != 2 or weight.dtype.kind != "f":
            return result.fail(f"{w.name}: not a constant 2-D float weight")
        shape = static_dims(x)
        if shape is None or len(shape) != 2:
            return result.fail(f"{mm.name}: BN over a rank-{len(shape or ())} MatMul output")
        return result

    def rewrite(self, op, x: ir.Value, w: ir.Value, mm: ir.Value, bn: ir.Value) -> ir.Value:
        s, t = bn_scale_shift(bn.producer())  # type: ignore[misc]
        weight = const(w)
        node = mm.producer()
        new_w = (weight.astype(np.float64) * s[None, :]).astype(weight.dtype)  # type: ignore[union-attr]
        return emit_linear(op, node, x, new_w, t, "bn")


def batchnorm_pass() -> list[RulePass]:
    root = ("BatchNormalization",)
    return [
        rule_pass("fuse_bn_into_conv", root, [FuseBatchNormIntoConv.rule()]),
        rule_pass("fuse_bn_into_conv_transpose", root, [FuseBatchNormIntoConvTranspose.rule()]),
        rule_pass("fuse_bn_into_gemm", root, [FuseBatchNormIntoGemm.rule()]),
        rule_pass("fuse_bn_into_matmul", root, [FuseBatchNormIntoMatMul.rule()]),
    ]
