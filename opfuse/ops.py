"""One table of per-op facts: fusion kind, FLOP/MAC formula, anchor and in-place capability.

Kinds follow TVM's OpPatternKind. An op type not in the table is OPAQUE: never fused and named as
the blocker, never an error. Formulas read static shapes from the node's values (the frontend makes
every shape static before any stage looks here).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

import onnx_ir as ir

from opfuse.op_norms import group_norm_flops, instance_norm_flops, layer_norm_flops, rms_norm_flops


class OpKind(enum.IntEnum):
    """Ordered as TVM orders them: a larger kind is harder to fuse into."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCE = 3
    ANCHOR = 4
    OPAQUE = 8


# How an elementwise op behaves as an epilogue. Targets accept epilogues by these classes.
CLAMP = "clamp"  # Relu, Clip (Relu6): a min/max on the accumulator, every int8 kernel has it
ACTIVATION = "activation"  # any other unary nonlinearity (Sigmoid, HardSwish, LeakyRelu, ...)
ARITH = "arith"  # binary arithmetic: Add/Sub/Mul/Div/Max/Min (bias, scale, residual)


def numel(value: ir.Value | None) -> int:
    if value is None or value.shape is None:
        return 0
    n = 1
    for d in value.shape:
        n *= d if isinstance(d, int) else 1
    return n


def _static(dim: object) -> int:
    """A dim's size, or 0 when it is not known (a custom op's output of unknown shape): MACs over
    an unknown size are not counted rather than invented (analyze says its totals are bounds)."""
    return dim if isinstance(dim, int) else 0


def _out(node: ir.Node) -> int:
    return numel(node.outputs[0])


def _in(node: ir.Node) -> int:
    return numel(node.inputs[0]) if node.inputs else 0


def _conv_macs(node: ir.Node) -> int:
    w = node.inputs[1]
    if w is None or w.shape is None:
        return 0
    kernel = math.prod(_static(d) for d in w.shape[2:]) if len(w.shape) > 2 else 1
    # Conv weight is (Cout, Cin/group, k...): every output element sums Cin/group * k products.
    return _out(node) * _static(w.shape[1]) * kernel


def _conv_transpose_macs(node: ir.Node) -> int:
    w = node.inputs[1]
    if w is None or w.shape is None:
        return 0
    kernel = math.prod(_static(d) for d in w.shape[2:]) if len(w.shape) > 2 else 1
    # ConvTranspose weight is (Cin, Cout/group, k...): every input element scatters into
    # Cout/group * k outputs.
    return _in(node) * _static(w.shape[1]) * kernel


def _matmul_macs(node: ir.Node) -> int:
    a = node.inputs[0]
    if a is None or a.shape is None or len(a.shape) == 0:
        return 0
    k = _static(a.shape[-1])
    if node.op_type == "Gemm":
        trans_a = node.attributes.get("transA")
        if trans_a is not None and trans_a.as_int():
            k = _static(a.shape[0])
    return _out(node) * k


def _window(node: ir.Node) -> int:
    ks = node.attributes.get("kernel_shape")
    return math.prod(ks.as_ints()) if ks is not None else 1


def _zero(node: ir.Node) -> int:
    return 0


@dataclass(frozen=True)
class OpInfo:
    kind: OpKind
    macs: Callable[[ir.Node], int] = _zero
    # FLOPs besides 2*MACs: per output element for elementwise ops, explicit formula otherwise.
    flops_per_elem: float = 0.0
    extra_flops: Callable[[ir.Node], int] | None = None
    epilogue: str | None = None  # CLAMP / ACTIVATION / ARITH for ops that may follow an anchor
    inplace: bool = False  # output may overwrite an input that dies here


def _ew(cost: float, epilogue: str = ACTIVATION) -> OpInfo:
    return OpInfo(OpKind.ELEMWISE, flops_per_elem=cost, epilogue=epilogue, inplace=True)


def _bin(cost: float = 1.0) -> OpInfo:
    return OpInfo(OpKind.BROADCAST, flops_per_elem=cost, epilogue=ARITH, inplace=True)


def _inj() -> OpInfo:
    return OpInfo(OpKind.INJECTIVE)


def _pool() -> OpInfo:
    return OpInfo(OpKind.REDUCE, extra_flops=lambda n: _out(n) * _window(n))


def _reduce(per_in: float = 1.0) -> OpInfo:
    return OpInfo(OpKind.REDUCE, extra_flops=lambda n: int(_in(n) * per_in))


OPS: dict[str, OpInfo] = {
    # anchors: their output stage can absorb an epilogue
    "Conv": OpInfo(OpKind.ANCHOR, macs=_conv_macs, extra_flops=lambda n: _out(n)),
    "ConvTranspose": OpInfo(OpKind.ANCHOR, macs=_conv_transpose_macs, extra_flops=lambda n: _out(n)),
    "Gemm": OpInfo(OpKind.ANCHOR, macs=_matmul_macs, extra_flops=lambda n: _out(n)),
    "MatMul": OpInfo(OpKind.ANCHOR, macs=_matmul_macs),
    # BatchNormalization left in the graph is a per-channel scale and shift
    "BatchNormalization": OpInfo(OpKind.BROADCAST, flops_per_elem=2, epilogue=ARITH, inplace=True),
    # unary elementwise
    "Relu": _ew(1, CLAMP),
    "Clip": _ew(2, CLAMP),
    "LeakyRelu": _ew(2),
    "PRelu": OpInfo(OpKind.BROADCAST, flops_per_elem=2, epilogue=ACTIVATION, inplace=True),
    "Sigmoid": _ew(4),
    "Tanh": _ew(4),
    "HardSigmoid": _ew(3),
    "HardSwish": _ew(4),
    "Elu": _ew(4),
    "Erf": _ew(8),
    "Gelu": _ew(12),  # 0.5 x (1 + erf(x / sqrt 2)): Div, Erf (8), Add, Mul, Mul, as decomposed
    "Swish": _ew(5),  # x * sigmoid(alpha x), ONNX opset 24: Sigmoid (4) + Mul, as decomposed
    "Neg": _ew(1),
    "Abs": _ew(1),
    "Sqrt": _ew(4),
    "Exp": _ew(4),
    "Log": _ew(4),
    "Reciprocal": _ew(1),
    "Softplus": _ew(5),
    "Sin": _ew(4),
    "Cos": _ew(4),
    "Not": OpInfo(OpKind.ELEMWISE, flops_per_elem=1),
    "IsNaN": OpInfo(OpKind.ELEMWISE, flops_per_elem=1),
    # binary (broadcasting) arithmetic
    "Add": _bin(),
    "Sub": _bin(),
    "Mul": _bin(),
    "Div": _bin(),
    "Max": _bin(),
    "Min": _bin(),
    "Pow": _bin(4),
    "Sum": _bin(),
    # selection and comparisons: one operation per output element (a bool output for the tests)
    "Where": OpInfo(OpKind.BROADCAST, flops_per_elem=1, inplace=True),
    "Equal": OpInfo(OpKind.BROADCAST, flops_per_elem=1),
    "Less": OpInfo(OpKind.BROADCAST, flops_per_elem=1),
    "Greater": OpInfo(OpKind.BROADCAST, flops_per_elem=1),
    "LessOrEqual": OpInfo(OpKind.BROADCAST, flops_per_elem=1),
    "GreaterOrEqual": OpInfo(OpKind.BROADCAST, flops_per_elem=1),
    "And": OpInfo(OpKind.BROADCAST, flops_per_elem=1),
    "Or": OpInfo(OpKind.BROADCAST, flops_per_elem=1),
    # reductions and pools
    "MaxPool": _pool(),
    "AveragePool": _pool(),
    "GlobalAveragePool": _reduce(),
    "GlobalMaxPool": _reduce(),
    "ReduceMean": _reduce(),
    "ReduceSum": _reduce(),
    "ReduceMax": _reduce(),
    "ReduceMin": _reduce(),
    "Softmax": OpInfo(OpKind.REDUCE, extra_flops=lambda n: 5 * _out(n)),
    # normalizations: FLOPs over the spec's function bodies (opfuse/op_norms.py)
    "LayerNormalization": OpInfo(OpKind.REDUCE, extra_flops=layer_norm_flops),
    "InstanceNormalization": OpInfo(OpKind.REDUCE, extra_flops=instance_norm_flops),
    "GroupNormalization": OpInfo(OpKind.REDUCE, extra_flops=group_norm_flops),
    "RMSNormalization": OpInfo(OpKind.REDUCE, extra_flops=rms_norm_flops),
    # injective: data movement only
    "Reshape": _inj(),
    "Flatten": _inj(),
    "Squeeze": _inj(),
    "Unsqueeze": _inj(),
    "Transpose": _inj(),
    "Concat": _inj(),
    "Split": _inj(),
    "Slice": _inj(),
    "Pad": _inj(),
    "Identity": _inj(),
    "Dropout": _inj(),
    "Cast": _inj(),
    "Resize": OpInfo(OpKind.INJECTIVE, extra_flops=lambda n: 4 * _out(n)),
    "Gather": _inj(),
    "Expand": _inj(),
    "Range": OpInfo(OpKind.INJECTIVE, flops_per_elem=2),  # output[i] = start + i * delta (spec)
    "Shape": _inj(),
    # float <-> int8 conversions kept at a quantized graph's boundaries (docs/architecture.md)
    "QuantizeLinear": OpInfo(OpKind.ELEMWISE, flops_per_elem=2),
    "DequantizeLinear": OpInfo(OpKind.ELEMWISE, flops_per_elem=2),
}

_OPAQUE = OpInfo(OpKind.OPAQUE)


def op_info(node: ir.Node) -> OpInfo:
    """Facts for a node; custom domains and unknown op types are OPAQUE."""
    if node.domain not in ("", "ai.onnx"):
        return _OPAQUE
    return OPS.get(node.op_type, _OPAQUE)


def kind(node: ir.Node) -> OpKind:
    return op_info(node).kind


def macs(node: ir.Node) -> int:
    return op_info(node).macs(node)


def flops(node: ir.Node) -> int:
    info = op_info(node)
    total = 2 * info.macs(node)
    if info.extra_flops is not None:
        total += info.extra_flops(node)
    total += int(info.flops_per_elem * _out(node))
    return total


def is_anchor(node: ir.Node) -> bool:
    return kind(node) == OpKind.ANCHOR
