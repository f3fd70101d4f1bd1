"""The op registry: per op its fusion kind, FLOP/MAC formula, group tags, in-place capability and
what the C backend writes for it (docs/architecture.md, "Op registry").

Kinds follow TVM's OpPatternKind. An op type not in the table is OPAQUE: never fused and named as
the blocker, never an error. Every op set in fusion, memory, cost, the frontends and the C backend
is a query over this table (``opfuse.ops.groups``), so an op is added here, once.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import onnx_ir as ir

from opfuse.ops.formulas import (
    conv_macs,
    conv_transpose_macs,
    in_elems,
    matmul_macs,
    out_elems,
    recurrent_flops,
    recurrent_macs,
    window,
    zero,
)
from opfuse.ops.norm_formulas import (
    group_norm_flops,
    instance_norm_flops,
    layer_norm_flops,
    rms_norm_flops,
)


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

# Group tags: the facts other stages ask about an op besides its kind.
TAGS = {
    "pool": "a windowed pool (kernel_shape over H and W)",
    "global_pool": "a pool over the whole spatial extent",
    "windowed": "reads a sliding window of rows (a cascade member's first op)",
    "view": "changes no byte: its output may alias its input",
    "addressed": "moves data an NPU compiler resolves in addresses (NHWC transposes, concat slices)",
    "reduction": "a Reduce* op over axes",
    "pool_reduce": "a reduction an NPU runs on its pooling unit (mean, max)",
    "conversion": "converts between float and an integer type",
    "matrix": "a matrix product (Gemm, MatMul)",
    "quantizable": "the QDQ frontend reads Q/DQ pairs around it as one int8 op",
    "quant_pass": "moves or selects int8 values: its output takes its input's quantization",
    "row_norm": "normalizes each row over the last axis (Add + norm and MatMul + norm kernels)",
    "integer": "the C backend also writes it over integer tensors (backends/c/typed.py)",
    "logic": "a boolean op: a value it reads is a mask (validation draws masks of ones)",
}

# C kernel families: how the C backend writes an op that heads a kernel (float) / in int8.
ANCHOR_K = "anchor"  # conv/gemm templates that take an epilogue chain in their store loop
EXPR = "expr"  # a scalar C expression (epilogue.py): standalone chains and fused epilogues
POOL_K = "pool"
VIEW_K = "view"  # an alias of its input in the memory plan, else a memcpy
LAYOUT = "layout"  # a strided copy (layout.py)
REDUCE_K = "reduce"
NORM = "norm"
SOFTMAX = "softmax"
CONVERT = "convert"  # int8: quantize / dequantize loops
CLAMP_K = "clamp"  # int8: the requantization clamp
BINARY_K = "binary"  # int8: TFLite's rescaled add/sub, one-multiplier mul
LUT = "lut"  # int8: a 256-entry table computed at generation time
MEAN = "mean"  # int8: ReduceMean
GATHER = "gather"  # float: embedding lookup and index select (gather.py)
TYPED = "typed"  # masks, casts, Range: own kernels, every operand in its own C type (typed.py)
RECURRENT = "recurrent"  # LSTM, GRU: the whole sequence in one kernel (recurrent.py)
FOLD = "fold"  # Col2Im: overlapping blocks summed into an image (col2im.py)
FLOAT_FAMILIES = (ANCHOR_K, EXPR, POOL_K, VIEW_K, LAYOUT, REDUCE_K, NORM, SOFTMAX, GATHER, TYPED,
                  RECURRENT, FOLD)
INT8_FAMILIES = (ANCHOR_K, POOL_K, MEAN, SOFTMAX, CONVERT, LAYOUT, VIEW_K, CLAMP_K, BINARY_K, LUT,
                 RECURRENT)


@dataclass(frozen=True)
class OpInfo:
    kind: OpKind
    macs: Callable[[ir.Node], int] = zero
    # FLOPs besides 2*MACs: per output element for elementwise ops, explicit formula otherwise.
    flops_per_elem: float = 0.0
    extra_flops: Callable[[ir.Node], int] | None = None
    epilogue: str | None = None  # CLAMP / ACTIVATION / ARITH for ops that may follow an anchor
    inplace: bool = False  # output may overwrite an input that dies here
    tags: frozenset[str] = field(default_factory=frozenset)
    c: str | None = None  # float C kernel family when the op heads a kernel (FLOAT_FAMILIES)
    c_expr: bool = False  # a float C scalar expression besides its family (Identity)
    c8: str | None = None  # int8 C kernel family (INT8_FAMILIES)
    cascade: bool = False  # cascaded float C streams it after a member's first op


def _with(info: OpInfo, tags: str = "", **facts: object) -> OpInfo:
    """``info`` with space-separated ``tags`` (each one of ``TAGS``) and C facts."""
    unknown = set(tags.split()) - TAGS.keys()
    if unknown:
        raise ValueError(f"unknown op tags {sorted(unknown)}")
    return replace(info, tags=frozenset(tags.split()), **facts)


def _ew(cost: float, epilogue: str = ACTIVATION, tags: str = "", **facts: object) -> OpInfo:
    info = OpInfo(OpKind.ELEMWISE, flops_per_elem=cost, epilogue=epilogue, inplace=True)
    return _with(info, tags, **facts)


def _bin(cost: float = 1.0, tags: str = "", **facts: object) -> OpInfo:
    info = OpInfo(OpKind.BROADCAST, flops_per_elem=cost, epilogue=ARITH, inplace=True)
    return _with(info, tags, **facts)


def _inj(tags: str = "", **facts: object) -> OpInfo:
    return _with(OpInfo(OpKind.INJECTIVE), tags, **facts)


def _pool(tags: str = "pool windowed", **facts: object) -> OpInfo:
    info = OpInfo(OpKind.REDUCE, extra_flops=lambda n: out_elems(n) * window(n))
    return _with(info, tags, **facts)


def _reduce(per_in: float = 1.0, tags: str = "reduction", **facts: object) -> OpInfo:
    info = OpInfo(OpKind.REDUCE, extra_flops=lambda n: int(in_elems(n) * per_in))
    return _with(info, tags, **facts)


def _anchor(macs: Callable[[ir.Node], int], bias: bool, tags: str = "", **facts: object) -> OpInfo:
    extra = (lambda n: out_elems(n)) if bias else None
    return _with(OpInfo(OpKind.ANCHOR, macs=macs, extra_flops=extra), tags, c=ANCHOR_K, **facts)


_V = "view quantizable quant_pass"  # a reshape-like view the QDQ frontend passes int8 through
OPS: dict[str, OpInfo] = {
    # anchors: their output stage can absorb an epilogue
    "Conv": _anchor(conv_macs, True, "windowed quantizable", c8=ANCHOR_K),
    "ConvTranspose": _anchor(conv_transpose_macs, True, "quantizable", c8=ANCHOR_K),
    "Gemm": _anchor(matmul_macs, True, "matrix quantizable", c8=ANCHOR_K),
    "MatMul": _anchor(matmul_macs, False, "matrix quantizable", c8=ANCHOR_K),
    # BatchNormalization left in the graph is a per-channel scale and shift
    "BatchNormalization": _bin(2, c=EXPR),
    # unary elementwise
    "Relu": _ew(1, CLAMP, "quantizable", c=EXPR, c8=CLAMP_K, cascade=True),
    "Clip": _ew(2, CLAMP, "quantizable", c=EXPR, c8=CLAMP_K, cascade=True),
    "LeakyRelu": _ew(2, tags="quantizable", c=EXPR, c8=LUT, cascade=True),
    "PRelu": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=2, epilogue=ACTIVATION, inplace=True),
                   "quantizable", c=EXPR),
    "Sigmoid": _ew(4, tags="quantizable", c=EXPR, c8=LUT, cascade=True),
    "Tanh": _ew(4, tags="quantizable", c=EXPR, c8=LUT, cascade=True),
    "HardSigmoid": _ew(3, c=EXPR, c8=LUT, cascade=True),
    "HardSwish": _ew(4, tags="quantizable", c=EXPR, c8=LUT, cascade=True),
    "Elu": _ew(4, c=EXPR, c8=LUT, cascade=True),
    "Erf": _ew(8, c=EXPR, cascade=True),
    # 0.5 x (1 + erf(x / sqrt 2)): Div, Erf (8), Add, Mul, Mul, as decomposed
    "Gelu": _ew(12, c=EXPR, c8=LUT, cascade=True),
    "Neg": _ew(1, tags="integer", c=EXPR, c8=LUT, cascade=True),
    "Abs": _ew(1, tags="integer", c=EXPR, c8=LUT, cascade=True),
    "Sqrt": _ew(4, c=EXPR, cascade=True),
    "Exp": _ew(4, c=EXPR, c8=LUT, cascade=True),
    "Log": _ew(4, c=EXPR, cascade=True),
    "Reciprocal": _ew(1, c=EXPR, cascade=True),
    "Softplus": _ew(5, c=EXPR, cascade=True),
    "Swish": _ew(5, c=EXPR, cascade=True),  # x * sigmoid(alpha x): Sigmoid (4) and Mul, as exported
    "Sin": _ew(4),
    "Cos": _ew(4),
    "Not": _with(OpInfo(OpKind.ELEMWISE, flops_per_elem=1), "logic", c=TYPED),
    "IsNaN": OpInfo(OpKind.ELEMWISE, flops_per_elem=1),
    # binary (broadcasting) arithmetic
    "Add": _bin(tags="quantizable integer", c=EXPR, c8=BINARY_K, cascade=True),
    "Sub": _bin(tags="quantizable integer", c=EXPR, c8=BINARY_K, cascade=True),
    "Mul": _bin(tags="quantizable integer", c=EXPR, c8=BINARY_K, cascade=True),
    "Div": _bin(tags="integer", c=EXPR, cascade=True),
    "Max": _bin(tags="integer", c=EXPR),
    "Min": _bin(tags="integer", c=EXPR),
    "Pow": _bin(4, c=EXPR),
    "Sum": _bin(c=EXPR, cascade=True),
    # masks: comparisons, logic and select; no epilogue (C: backends/c/typed.py, own kernels)
    "Where": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), c=TYPED),
    "Equal": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), c=TYPED),
    "Less": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), c=TYPED),
    "Greater": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), c=TYPED),
    "LessOrEqual": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), c=TYPED),
    "GreaterOrEqual": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), c=TYPED),
    "And": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), "logic", c=TYPED),
    "Or": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), "logic", c=TYPED),
    "Xor": _with(OpInfo(OpKind.BROADCAST, flops_per_elem=1), "logic", c=TYPED),
    # reductions and pools
    "MaxPool": _pool("pool windowed quantizable quant_pass", c=POOL_K, c8=POOL_K),
    "AveragePool": _pool("pool windowed quantizable", c=POOL_K, c8=POOL_K),
    "GlobalAveragePool": _reduce(1, "global_pool pool_reduce quantizable", c=POOL_K, c8=POOL_K),
    "GlobalMaxPool": _reduce(1, "global_pool pool_reduce", c=POOL_K),
    "ReduceMean": _reduce(1, "reduction pool_reduce quantizable", c=REDUCE_K, c8=MEAN),
    "ReduceSum": _reduce(c=REDUCE_K),
    "ReduceMax": _reduce(1, "reduction pool_reduce", c=REDUCE_K),
    "ReduceMin": _reduce(c=REDUCE_K),
    "Softmax": _with(OpInfo(OpKind.REDUCE, extra_flops=lambda n: 5 * out_elems(n)),
                     "quantizable", c=SOFTMAX, c8=SOFTMAX),
    # normalizations: FLOPs over the spec's function bodies (opfuse/ops/norm_formulas.py)
    "LayerNormalization": _with(OpInfo(OpKind.REDUCE, extra_flops=layer_norm_flops), "row_norm",
                                c=NORM),
    "InstanceNormalization": _with(OpInfo(OpKind.REDUCE, extra_flops=instance_norm_flops), c=NORM),
    "GroupNormalization": _with(OpInfo(OpKind.REDUCE, extra_flops=group_norm_flops), c=NORM),
    "RMSNormalization": _with(OpInfo(OpKind.REDUCE, extra_flops=rms_norm_flops), "row_norm", c=NORM),
    # injective: data movement only
    "Reshape": _inj(_V, c=VIEW_K, c8=VIEW_K),
    "Flatten": _inj(_V, c=VIEW_K, c8=VIEW_K),
    "Squeeze": _inj(_V, c=VIEW_K, c8=VIEW_K),
    "Unsqueeze": _inj(_V, c=VIEW_K, c8=VIEW_K),
    # Identity heads a view in float and a table in int8; its float expression serves chains
    "Identity": _inj("view quant_pass", c=VIEW_K, c_expr=True, c8=LUT, cascade=True),
    "Dropout": _inj("view", c=VIEW_K, c8=VIEW_K),  # inference: its output is its input
    "Transpose": _inj("addressed quantizable quant_pass", c=LAYOUT, c8=LAYOUT),
    "Concat": _inj("addressed quantizable", c=LAYOUT, c8=LAYOUT),
    "Split": _inj("quant_pass", c=LAYOUT, c8=LAYOUT),
    "Slice": _inj("quant_pass", c=LAYOUT, c8=LAYOUT),
    "Pad": _inj("quantizable quant_pass", c=LAYOUT, c8=LAYOUT),
    "DepthToSpace": _inj("quantizable quant_pass"),
    "Cast": _inj(c=TYPED),
    "Resize": _with(OpInfo(OpKind.INJECTIVE, extra_flops=lambda n: 4 * out_elems(n)),
                    "quantizable", c=LAYOUT, c8=LAYOUT),
    "Gather": _inj(c=GATHER),
    "Expand": _inj(c=LAYOUT, c8=LAYOUT),
    "Range": _with(OpInfo(OpKind.INJECTIVE, flops_per_elem=2), c=TYPED),  # start + i * delta
    "Shape": _inj(),
    # torch's nn.Fold: one add per column entry (those landing in the padding included)
    "Col2Im": _with(OpInfo(OpKind.INJECTIVE, extra_flops=in_elems), c=FOLD),
    # recurrences over time steps: never fused (opaque to fusion), each its own C kernel
    # an int8 LSTM is TFLite's UNIDIRECTIONAL_SEQUENCE_LSTM (frontends/tflite/ops_lstm.py)
    "LSTM": _with(OpInfo(OpKind.OPAQUE, macs=recurrent_macs, extra_flops=recurrent_flops),
                  "quantizable", c=RECURRENT, c8=RECURRENT),
    "GRU": OpInfo(OpKind.OPAQUE, macs=recurrent_macs, extra_flops=recurrent_flops, c=RECURRENT),
    # float <-> int8 conversions kept at a quantized graph's boundaries (docs/architecture.md)
    "QuantizeLinear": _with(OpInfo(OpKind.ELEMWISE, flops_per_elem=2), "conversion", c8=CONVERT),
    "DequantizeLinear": _with(OpInfo(OpKind.ELEMWISE, flops_per_elem=2), "conversion", c8=CONVERT),
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
    total += int(info.flops_per_elem * out_elems(node))
    return total


def is_anchor(node: ir.Node) -> bool:
    return kind(node) == OpKind.ANCHOR
