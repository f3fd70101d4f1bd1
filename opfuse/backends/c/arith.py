"""The arithmetic a kernel family is written against (issue 28's ``Arith``): float32 sums, or int8
products summed in int32 and requantized the way TFLite Micro does. A family (dwrow.py: the
depthwise row read in place) spells its loop nest once and asks the record for what depends on
the dtype:

* ``acc_type``, ``in_type``: the C types of a sum and of an input element (a row pointer's);
* ``product(x, t)``: input ``x`` times the channel's tap ``t`` (float: the tap loaded into the
  scalar ``w<t>`` once per channel; int8: read from ``wc``, the channel's int8 taps);
* ``pad(t)``: a tap outside the input row: float writes the product by 0.0f, so a border
  column's sum keeps the band core's terms in their order (bit-identical, dwconv.py); int8 has
  folded the zero point's share of every tap into the bias, so it writes nothing;
* ``init(k0, k1)``: the sum's first term, from the bias (float: ``bv``; int8: ``bk<k0>_<k1>``,
  the bias with z_x times the taps ``k0 .. k1`` of every row folded in);
* ``centered(x)`` and ``bias``: the input as a loop over a window's taps reads it (int8: less
  its zero point) and the bias that loop starts from (nothing folded);
* ``finish(w, acc)``: the value ``v`` the epilogue and the store take (float: the sum itself,
  already ``v``; int8: requantized, plus z_y, clamped: ``depthwise_quant.emit_clamped``, the one
  requantization of the depthwise family, with the ISA's fast form where it is exact).
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.int8.depthwise_quant import DwQuant, emit_clamped
from opfuse.backends.c.isa.base import IsaKernels
from opfuse.kernelplan.conv8 import PAIR


@dataclass(frozen=True)
class Float32:
    """float32 sums; the epilogue takes the sum as it is."""

    acc_type = "float"
    in_type = "float"
    acc = "v"  # the epilogue's scalar: the sum is declared under its name
    declare = "float v"
    bias = "bv"
    # columns summed one at a time (no SIMD pairs); every border column's taps written out, in
    # the band core's order
    pair = 1
    loop_borders_above = None

    @staticmethod
    def product(x: str, t: int) -> str:
        return f"w{t} * {x}"

    @staticmethod
    def pad(t: int) -> str | None:
        return f"w{t} * 0.0f"

    @staticmethod
    def init(k0: int, k1: int) -> str:  # noqa: ARG004 - float folds nothing into its bias
        return "bv"

    @staticmethod
    def centered(x: str) -> str:
        return x

    def finish(self, w: CWriter, acc: str, doubled: bool | None = None) -> None:
        """Nothing: the float sum is the epilogue's ``v``."""


FLOAT32 = Float32()


@dataclass(frozen=True)
class Int8:
    """int8 inputs and taps, int32 sums, TFLite's requantization to the output's ``lo .. hi``."""

    isa: IsaKernels
    dq: DwQuant
    lo: int
    hi: int
    acc_type = "int32_t"
    in_type = "int8_t"
    acc = "acc"
    declare = "const int32_t acc"
    bias = "bc"
    pair = PAIR  # interior columns in groups of the ISA's SIMD pairs (IsaKernels.depthwise_pairs)
    # a window of more taps runs its border columns in one loop (depthwise_dsp.unrolled_singles)
    loop_borders_above = 9

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
