"""The quantization half of the int8 depthwise kernel (opfuse/backends/c/int8/depthwise_dsp.py;
docs/architecture.md, "int8 in the IR"): a layer's zero points and requantization constants, and
the record (``Int8``) whose finish is int8/output.py's requantization with these hoisted
constants, in TFLite's integers on every path (with the ISA's faster form,
``IsaKernels.fast_requant``, where the accumulator bound proves it exact).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.ctype import INT32
from opfuse.backends.c.int8 import common
from opfuse.backends.c.int8.chain import clamp_span
from opfuse.backends.c.int8.common import Requant, int_ctype, quant, requant_arrays, rounding
from opfuse.backends.c.int8.output import emit_clamped
from opfuse.backends.c.isa import IsaKernels, kernels
from opfuse.backends.c.tensors import Params
from opfuse.ir.values import const
from opfuse.kernelplan.conv8 import PAIR, ConvGeom
from opfuse.quant import ONNX, TFLITE, conv_scales, multipliers


@dataclass(frozen=True)
class DwQuant:
    """A depthwise layer's quantization as its C needs it: the input's and output's zero points,
    the requantization arrays, and whether any channel shifts left (most do not: then the left
    shift is left out)."""

    zx: int
    zy: int
    rq: Requant
    left_shift: bool
    fast: bool = False  # opfuse_requant_r is exact here (common.py, acc_bound)
    doubled: bool = False  # an ISA's fast form may requantize 2x the sum in one shift fewer
    zy_folded: bool = False  # and its rounding constant adds z_y too (fits in 32 bits)


def dw_quant(params: Params, node: ir.Node, g: ConvGeom) -> DwQuant:
    xq = quant(node.inputs[0], node, "input")
    wq, yq = quant(node.inputs[1], node, "weight"), quant(node.outputs[0], node, "output")
    real = conv_scales(xq, wq, yq, g.oc, rounding(params))
    xct = int_ctype(node.inputs[0], node)
    taps = const(node.inputs[1]).reshape(g.c, g.k[0] * g.k[1])
    bias = common.bias_array(node, 2, g.oc)
    bound = common.acc_bound(taps, bias, xct.lo, xct.hi, int(xq.zero_point[0]))
    # the arrays a cascade's member registers too (cascade.py): TFLite's (multiplier, shift);
    # ONNX's scales, whose call the bound may spare the clamps (Requant.ranged)
    rq = requant_arrays(params, node.name, real, bound if rounding(params) == ONNX else None)
    shifts = multipliers(real)[1] if rq.mode == TFLITE else np.zeros(1, np.int32)
    fast = rq.mode == TFLITE and bound < common.FAST_BOUND and bool((shifts <= -1).all())
    left = bool((shifts > 0).any())
    zy = int(yq.zero_point[0])
    doubled = fast and bool((shifts >= -31).all())
    # |h| <= bound after the multiply (requant.py): the constant 2^(e-1) + z_y*2^e must leave
    # the sum inside int32 for every channel's e = -shift
    e = -shifts.astype(np.int64)
    folded = doubled and bool((bound + (1 << (e - 1)) + abs(zy) * (1 << e) < 1 << 31).all())
    return DwQuant(int(xq.zero_point[0]), zy, rq, left, fast, doubled, folded)


def isa_row(params: Params, dq: DwQuant, pre: list[ir.Node] | None, yct) -> Callable | None:  # noqa: ANN001
    """The ISA's interior row (``IsaKernels.depthwise_row``), with its vector output stage where
    it gives the same integers (``pre`` the layer-by-layer kernel's chain, clamps only; None: a
    cascade member, stored lane by lane; ONNX's rounding by the channel's ``scale``)."""
    row = kernels(params.store.isa).depthwise_row
    if row is None:
        return None
    span = None
    if pre is not None and (yct.lo, yct.hi) == (-128, 127):
        span = clamp_span(pre, params)
    zy = 0 if dq.doubled and dq.zy_folded else dq.zy  # opfuse_requant_d's qr holds it
    onnx = {"scale": dq.rq.scale("c"), "ranged": dq.rq.ranged} if dq.rq.mode == ONNX else {}
    return partial(row, vec=None if span is None else (zy, *span), fast=dq.fast, **onnx)


def folded_biases(params: Params, node: ir.Node, g: ConvGeom, zx: int,
                  bias_classes: set[tuple[int, int]]) -> str | None:
    """A cascade member's ``bk<k0>_<k1>`` as a constant table [C][classes] (int32): the bias with
    z_x times the taps k0 .. k1 of every row folded in, the very sums the channel setup would
    form on every output row of every channel (a member computes one row a call, and the MVE
    row's setup then cost as much as its vectors). None where a sum leaves int32."""
    kh_, kw_ = g.k
    classes = sorted(bias_classes)  # the channel setup's order
    taps = const(node.inputs[1]).reshape(g.c, kh_, kw_).astype(np.int64)
    bias = common.bias_array(node, 2, g.oc).astype(np.int64)
    table = np.stack([bias - zx * taps[:, :, k0:k1].sum(axis=(1, 2)) for k0, k1 in classes],
                     axis=1) if classes else np.zeros((g.c, 0), np.int64)
    if not classes or table.min() < -2**31 or table.max() >= 2**31:
        return None
    return params.weight(f"{node.name}:dw_bk", table.astype(np.int32), INT32)


@dataclass(frozen=True)
class Int8:
    """The int8 record of ``arith.Arith`` (opfuse/backends/c/arith.py): int8 inputs and taps,
    int32 sums, TFLite's requantization to the output's ``lo .. hi`` as their finish."""

    isa: IsaKernels
    dq: DwQuant
    lo: int
    hi: int
    acc_type = "int32_t"
    in_type = "int8_t"
    w_type = "int8_t"
    term_type = "int32_t"
    zero = "0"
    channels_per_term = 1
    loop_channels = '_Pragma("GCC unroll 1") '  # as Int8Sums' (int8/pointwise.py)
    acc = "acc"
    declare = "const int32_t acc"
    bias = "bc"
    pair = PAIR  # interior columns in groups of the ISA's SIMD pairs (IsaKernels.depthwise_pairs)
    # a window of more taps runs its border columns in one loop (dwrow.unrolled)
    loop_borders_above = 9

    @staticmethod
    def term(products: list[str]) -> str:
        return " + ".join(products)

    @staticmethod
    def product(x: str, t: int) -> str:
        return f"{x}*wc[{t}]"

    @staticmethod
    def pad(t: int) -> str | None:  # noqa: ARG004 - z_x's share is in the bias
        return None

    @staticmethod
    def init(k0: int, k1: int) -> str:
        return f"bk{k0}_{k1}"

    def centered(self, x: str) -> str:
        return f"((int32_t){x} - {self.dq.zx})"

    def finish(self, w: CWriter, acc: str, doubled: bool | None = None) -> None:
        """``int32_t v``: ``acc`` requantized, plus z_y, clamped (``doubled``: as the ISA's row
        asks; else the layer's ``DwQuant.doubled``)."""
        emit_clamped(w, self.isa, self.dq, acc, self.lo, self.hi,
                     self.dq.doubled if doubled is None else doubled)
