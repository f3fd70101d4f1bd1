"""A BatchNormalization that no linear op absorbed becomes a per-channel Mul + Add.

    BN(x) = gamma * (x - mean) / sqrt(var + eps) + beta = x * s + t
    s = gamma / sqrt(var + eps),   t = beta - mean * s

``s`` and ``t`` are folded constants of shape (C, 1, ..., 1) (rank of x minus one, so they
broadcast along axis 1). Runs after the BN-into-linear rules had their chance, so it only sees a
BN whose producer is not a linear op, or one that cannot absorb it (output used elsewhere, a
higher-rank MatMul). A BN right after a linear op whose weights are not constants (weights fed as
graph inputs) is kept: the partitioner reports it as ``non_constant_weights``. Training-mode BN and
BN with non-constant parameters are kept too.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern

from opfuse.ir.values import const, static_dims
from opfuse.passes._driver import RulePass, rule_pass
from opfuse.passes._linear import LINEAR_OPS
from opfuse.passes.batchnorm import bn_scale_shift


class BatchNormToMulAdd(pattern.RewriteRuleClassBase):
    def pattern(self, op, x):
        return op.BatchNormalization(x, _allow_other_inputs=True, _outputs=["bn"])

    def check(self, context, x: ir.Value, bn: ir.Value) -> MatchResult:
        result = MatchResult()
        node = bn.producer()
        if bn_scale_shift(node) is None:
            return result.fail(f"{node.name}: training mode or non-constant parameters")
        shape = static_dims(x)
        if shape is None or len(shape) < 2 or x.dtype is None:
            return result.fail(f"{x.name}: no static shape of rank >= 2")
        producer = x.producer()
        if producer is not None and producer.op_type in LINEAR_OPS and producer.domain == "":
            if len(producer.inputs) < 2 or const(producer.inputs[1]) is None:
                return result.fail(f"{producer.name}: non-constant weights; BN kept")
        return result

    def rewrite(self, op, x: ir.Value, bn: ir.Value) -> ir.Value:
        node = bn.producer()
        s, t = bn_scale_shift(node)  # type: ignore[misc]
        dtype = x.dtype.numpy()  # type: ignore[union-attr]
        rank = len(x.shape)  # type: ignore[arg-type]
        shape = (-1,) + (1,) * (rank - 2)
        base = node.name or "bn"
        scale = op.initializer(ir.Tensor(s.reshape(shape).astype(dtype)), name=f"{base}_scale")
        shift = op.initializer(ir.Tensor(t.reshape(shape).astype(dtype)), name=f"{base}_shift")
        scaled = op.Mul(x, scale, _name=f"{base}_mul")
        scaled.shape, scaled.type = ir.Shape(x.shape), x.type
        return op.Add(scaled, shift, _name=f"{base}_add")


def batchnorm_affine_pass() -> RulePass:
    return rule_pass("batchnorm_to_mul_add", ("BatchNormalization",), [BatchNormToMulAdd.rule()])
