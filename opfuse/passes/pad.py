"""Fold an explicit Pad into the Conv or pool that reads it.

With a constant-mode Pad adding ``p`` (>= 0) on spatial axes only, value ``v``:

    Conv(Pad(x, p, 0))                   = Conv(x, pads = pads + p)
    AveragePool(Pad(x, p, 0))            = AveragePool(x, pads = pads + p, count_include_pad = 1)
    MaxPool(Pad(x, p, v))                = MaxPool(x, pads = pads + p)    when v <= every x

On int8 values (docs/architecture.md, "int8 in the IR") implicit padding is the real 0, i.e. the
input's zero point: a quantized Pad folds into a Conv or AveragePool only when its value equals
the zero point and it does not requantize (same params on both sides); into a MaxPool also when
its value is the dtype's minimum, which no input is below.

A Conv's implicit padding is zero, so only ``v = 0`` folds (onnxscript's ``fuse_pad_into_conv_rule``,
after ``normalize_pad_format_conv_rule`` spelled out any ``auto_pad``). An AveragePool that counts
padding divides by the full window, which is what averaging over the zero-padded tensor does; a
pool that already has its own pads with ``count_include_pad = 0`` would need two different rules
at once, so it is refused, as are ``ceil_mode = 1`` (windows past the end change their divisor) and
``auto_pad``. MaxPool's implicit padding is -inf: ``v = -inf`` is the same thing, and a ``v`` no
larger than any input (``v <= 0`` after Relu/Sigmoid, ``v <= min`` after Clip) gives the same max
provided every window still holds one real element (pads < kernel, dilation 1, floor mode, no
Indices output). Anything else is left alone.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern
from onnxscript.rewriter.rules.common import normalize_pad_format_conv_rule
from onnxscript.rewriter.rules.common._fuse_pad_into_conv import FuseConvPad, fill_pads_with_axes  # noqa: PLC2701 (onnxscript exports its rules only as instances; opfuse subclasses them: pinned <0.8)

from opfuse.ir.values import const, static_dims
from opfuse.passes._driver import RulePass, rule_pass
from opfuse.quant import get_quant

_NONNEGATIVE = ("Relu", "Sigmoid", "HardSigmoid", "Softplus", "Abs", "Exp")


def read_pad(pad: ir.Node, rank: int) -> tuple[list[int], float] | None:
    """(spatial pads as begin..., end..., value) of a constant-mode Pad; None if not foldable."""
    if pad.attributes.get_string("mode", "constant") != "constant":
        return None
    pads = const(pad.inputs[1]) if len(pad.inputs) > 1 else None
    if pads is None:
        return None
    value = 0.0
    if len(pad.inputs) > 2 and pad.inputs[2] is not None:
        v = const(pad.inputs[2])
        if v is None or v.size != 1:
            return None
        value = float(v.reshape(-1)[0])
    axes = list(range(rank))
    if len(pad.inputs) > 3 and pad.inputs[3] is not None:
        a = const(pad.inputs[3])
        if a is None:
            return None
        axes = [int(i) % rank for i in a.reshape(-1)]
    full = fill_pads_with_axes([int(p) for p in pads.reshape(-1)], axes, rank)
    if any(full[i] or full[rank + i] for i in (0, 1)) or any(p < 0 for p in full):
        return None
    return full[2:rank] + full[rank + 2 :], value


class FusePadIntoPool(pattern.RewriteRuleClassBase):
    """``Pool(Pad(x))`` -> ``Pool(x, pads + p)`` for AveragePool and MaxPool."""

    def __init__(self, pool: str) -> None:
        super().__init__(name=f"FusePadInto{pool}")
        self.pool = pool
        self._pads: list[int] = []

    def pattern(self, op, x):
        padded = op.Pad(x, _allow_other_inputs=True, _outputs=["padded"])
        return getattr(op, self.pool)(padded, _outputs=["pooled"])

    def check(self, context, x: ir.Value, padded: ir.Value, pooled: ir.Value) -> MatchResult:
        result = MatchResult()
        node = pooled.producer()
        shape = static_dims(x)
        params = get_quant(x)
        if shape is None or (params is None and x.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16)):
            return result.fail(f"{x.name}: no static shape or not float")
        read = read_pad(padded.producer(), len(shape))
        if read is None:
            return result.fail(f"{padded.name}: not a constant, non-negative, spatial Pad")
        pads, value = read
        if params is not None:
            failed = _quant_pad_fails(x, padded, value, self.pool == "MaxPool")
            if failed:
                return result.fail(failed)
            value = 0.0 if value == params.zero_point[0] else -math.inf  # in real terms
        attrs = node.attributes
        if attrs.get_string("auto_pad", "NOTSET") != "NOTSET" or attrs.get_int("ceil_mode", 0):
            return result.fail(f"{node.name}: auto_pad or ceil_mode")
        spatial = len(shape) - 2
        old = list(attrs.get_ints("pads", [0] * 2 * spatial))
        kernel = list(attrs.get_ints("kernel_shape", []))
        new = [a + b for a, b in zip(old, pads, strict=True)]
        if len(kernel) != spatial or any(p >= kernel[i % spatial] for i, p in enumerate(new)):
            return result.fail(f"{node.name}: pads would reach a whole kernel window")
        if self.pool == "AveragePool":
            if value != 0.0:
                return result.fail(f"{padded.name}: pad value {value} is not 0")
            if any(old) and not attrs.get_int("count_include_pad", 0):
                return result.fail(f"{node.name}: own pads excluded from the average")
        else:
            if len(node.outputs) > 1 or any(d != 1 for d in attrs.get_ints("dilations", [1])):
                return result.fail(f"{node.name}: Indices output or dilation")
            if not (value == -math.inf or _lower_bound(x) >= value):
                return result.fail(f"{padded.name}: pad value {value} may exceed an input")
        self._pads = new
        return result

    def rewrite(self, op, x: ir.Value, padded: ir.Value, pooled: ir.Value) -> ir.Value:
        node = pooled.producer()
        attrs = {k: v for k, v in node.attributes.items() if k != "pads"}
        attrs["pads"] = ir.AttrInt64s("pads", self._pads)
        if self.pool == "AveragePool":
            attrs["count_include_pad"] = ir.AttrInt64("count_include_pad", 1)
        return op.op(self.pool, x, _name=node.name, **attrs)


def _quant_pad_fails(x: ir.Value, padded: ir.Value, value: float, minimum_ok: bool) -> str | None:
    """Why an int8 Pad of ``x`` filling ``value`` does not fold (None when it does)."""
    params = get_quant(x)
    assert params is not None
    if params.per_channel or get_quant(padded) != params:
        return f"{padded.name}: the int8 Pad requantizes (other params than {x.name})"
    if value == params.zero_point[0]:
        return None
    if minimum_ok and x.dtype is not None and value <= np.iinfo(x.dtype.numpy()).min:
        return None
    return f"{padded.name}: pad value {value:g} is not the zero point {params.zero_point[0]} of {x.name}"


class FuseQuantizedConvPad(FuseConvPad):
    """onnxscript's Conv(Pad(x)) fold, exact on int8: the pad value must be x's zero point."""

    def check(self, context, x: ir.Value, pad: ir.Value, conv: ir.Value) -> MatchResult:
        params = get_quant(x)
        if params is None:
            return super().check(context, x, pad, conv)
        result = MatchResult()
        shape = static_dims(x)
        read = read_pad(pad.producer(), len(shape)) if shape is not None else None
        if read is None:
            return result.fail(f"{pad.name}: not a constant, non-negative, spatial Pad")
        failed = _quant_pad_fails(x, pad, read[1], minimum_ok=False)
        if failed:
            return result.fail(failed)
        if conv.producer().attributes.get_string("auto_pad", "NOTSET") != "NOTSET":
            return result.fail(f"{conv.name}: auto_pad")
        spatial = len(shape) - 2
        self._pads_list = [0, 0, *read[0][:spatial], 0, 0, *read[0][spatial:]]
        return result


def _lower_bound(x: ir.Value) -> float:
    """A value no element of ``x`` is below, from its producer; -inf when unknown."""
    node = x.producer()
    if node is None or node.domain != "":
        return -math.inf
    if node.op_type in _NONNEGATIVE:
        return 0.0
    if node.op_type == "Clip" and len(node.inputs) > 1 and node.inputs[1] is not None:
        low = const(node.inputs[1])
        return (
            float(np.asarray(low).reshape(-1)[0])
            if low is not None and low.size == 1
            else -math.inf
        )
    return -math.inf


def pad_passes() -> list[RulePass]:
    return [
        rule_pass("normalize_conv_auto_pad", ("Conv",), [normalize_pad_format_conv_rule]),
        rule_pass("fuse_pad_into_conv", ("Conv",), [FuseQuantizedConvPad.rule()]),
        rule_pass("fuse_pad_into_avgpool", ("AveragePool",), [FusePadIntoPool.rule("AveragePool")]),
        rule_pass("fuse_pad_into_maxpool", ("MaxPool",), [FusePadIntoPool.rule("MaxPool")]),
    ]
