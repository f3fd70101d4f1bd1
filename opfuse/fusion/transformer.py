"""Fusions transformers need beyond an anchor's epilogue: a Linear's bias, and Add + norm with the
sum as a second output (docs/architecture.md, "Transformer fusions").

**The anchor's bias.** A Linear layer exports as ``MatMul(x, W)`` then ``Add(., b)`` with ``b`` a
constant of shape ``[N]`` (or ``[1, ..., 1, N]``), ``N`` the last dim of the product:

    y[..., j] = sum_k x[..., k] W[k, j] + b[j]

``b[j]`` is the fully connected kernel's bias (Gemm's C input, Conv's bias), added to the
accumulator before the output stage, not an arithmetic epilogue: every target takes it
(``FusionCaps.anchor_bias``, true unless a target file says otherwise; CMSIS-NN's
``arm_fully_connected_s8`` takes a bias), including those whose output stage is only a clamp, and
it does not count towards ``max_chain``. Traffic: the bias is a weight read once; the sum before it
is never stored.

**Add + normalization with the sum as a second output.** A pre-norm residual block writes

    s = a + b;   y = LayerNorm(s) (or RMSNorm(s));   ... the next residual reads s again

so ``s`` has two readers and the edge Add -> norm is refused with ``multiple_consumers``. One
kernel may compute ``s`` row by row, store it (a second, graph-visible output, as onnxruntime's
SkipLayerNormalization's optional fourth output does) and normalise the row in the same pass: s is
written once and never read back by the norm. Allowed on every target when the Add ends a
standalone elementwise kernel (BERT's embedding sums are a chain of two Adds; a post-norm block's
sum has no other reader and is not stored at all); an Add that already joined an anchor's output
stage (a residual add on x86-host) stays there, and on a target with ``anchor_norm`` (x86-host,
mobile-gpu) the norm joins that MatMul/Gemm kernel, which normalises each output row right after
storing it (MatMul + bias + residual Add + LayerNorm: one kernel; a post-norm sum nothing else
reads stays in a row buffer); elsewhere that kernel stores s and the norm reads it once. The norm must normalise the last axis only (a row of s is complete when it is
normalised), and every other reader of s must come after the norm in the schedule: the kernel,
placed at its tip, then still precedes them, so the partitioner's no-cycle argument holds with
"no member but the tip is read from outside" relaxed to "read only by nodes after the tip".
The norm closes its kernel (``rules.next_stage``).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from opfuse.fusion.constraints import first_pattern_refusal
from opfuse.fusion.norm_checks import ADD_NORM, NormCase
from opfuse.fusion.rules import CONVERSIONS, ELEMWISE, Group, Refusal, is_constant
from opfuse.ops import OpKind, groups, kind
from opfuse.quant import get_quant
from opfuse.targets import Target

LINEAR_OPS = groups.MATRIX
NORM_OPS = groups.ROW_NORMS


def _dims(value: ir.Value | None) -> tuple | None:
    if value is None or value.shape is None:
        return None
    dims = tuple(value.shape)
    return dims if all(isinstance(d, int) for d in dims) else None


def is_anchor_bias(anchor: ir.Node, v: ir.Node, x: ir.Value) -> bool:
    """``v`` adds a constant bias along the last dim of the linear ``anchor``'s output ``x``."""
    if anchor.op_type not in LINEAR_OPS or v.op_type != "Add" or v.domain not in ("", "ai.onnx"):
        return False
    if anchor.op_type == "Gemm" and len(anchor.inputs) > 2 and anchor.inputs[2] is not None:
        return False  # it has a bias already
    if x is not anchor.outputs[0] or len(v.inputs) != 2:
        return False
    bias = v.inputs[1] if v.inputs[0] is x else v.inputs[0]
    out, shape = _dims(x), _dims(bias)
    if bias is x or not is_constant(bias) or not out or shape is None:
        return False
    if _dims(v.outputs[0]) != out or bias.dtype != x.dtype:
        return False
    return len(shape) >= 1 and shape[-1] == out[-1] and all(d == 1 for d in shape[:-1])


def takes_bias(group: Group, v: ir.Node, x: ir.Value, target: Target) -> bool:
    """The anchor kernel ``group`` (nothing after its anchor yet) takes ``v`` as its bias."""
    return (
        target.fusion.anchor_bias
        and len(group.nodes) == 1
        and is_anchor_bias(group.head, v, x)
    )


def bias_members(nodes: Sequence[ir.Node]) -> int:
    """1 when the second member is the first member's bias (it is not an op of the chain)."""
    return int(len(nodes) > 1 and is_anchor_bias(nodes[0], nodes[1], nodes[0].outputs[0]))


def norm_with_sum(
    p: ir.Node, v: ir.Node, x: ir.Value, group: Group, index: dict[int, int], target: Target
) -> Refusal | None | bool:
    """Whether the norm ``v`` joins the standalone elementwise kernel ``group`` ending in ``p``
    (the residual Add), storing the sum ``x`` as a second output when others read it.

    False: not this case (the ordinary rules decide). None: it joins. A Refusal: the case, declined
    by the first constraint of ``norm_checks.ADD_NORM``, with the reason a person should read.
    """
    if v.op_type not in NORM_OPS or v.domain not in ("", "ai.onnx") or v.inputs[0] is not x:
        return False
    if get_quant(x) is not None or group.nodes[-1] is not p:
        return False  # int8: requantized between the two; p not its kernel's tip: rule 1
    if kind(p) not in (OpKind.ELEMWISE, OpKind.BROADCAST, OpKind.ANCHOR) or p.op_type in CONVERSIONS:
        return False  # a layout change, a reduction, a float <-> int8 conversion: ordinary rules
    case = NormCase(p, v, x, group, index, target)
    if not case.others and (group.stage != ELEMWISE if not case.in_anchor
                            else not target.fusion.anchor_norm):
        return False  # a sum read once, not in a standalone elementwise kernel: ordinary rules
    return first_pattern_refusal(case, ADD_NORM)
