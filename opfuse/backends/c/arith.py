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
  already ``v``; int8: requantized, plus z_y, clamped: ``int8/output.emit_clamped``, the one
  requantization of the depthwise family, with the ISA's fast form where it is exact).

The records: ``FLOAT32`` (here) and ``int8.depthwise_quant.Int8`` (one per layer: its ISA, its
quantization and its output's range).

pointwise.py's column tiles (the pointwise family, float and int8) ask for less, ``Sums``: the
sum's, input's and weight's C types, the type a broadcast weight and a loaded input take in the
products (``term_type``: the float itself, or an int8 widened to int32), an empty sum
(``zero``), the input channels one term sums (``channels_per_term``: int8 adds two products in
int16 where that is exact) and its spelling ``term``, what precedes a channel tile's vector loop
over its lanes (``loop_channels``: int8 keeps gcc from unrolling it) and ``finish``; its int8 record is
``int8.pointwise.Int8Sums`` (TFLite's requantization through int8/output.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from opfuse.backends.c.cgen import CWriter


class Sums(Protocol):
    """What pointwise.py's column tiles ask of their arithmetic (the module's docstring):
    ``Float32`` here, ``int8.pointwise.Int8Sums`` in the int8 package."""

    acc_type: str
    in_type: str
    w_type: str  # a weight's C type
    term_type: str  # a broadcast weight's and a loaded input's, as the products take them
    zero: str  # a sum of no terms
    channels_per_term: int  # input channels whose products one term of a column tile sums
    loop_channels: str  # what precedes a channel tile's vector loop over its lanes (a pragma)

    def term(self, products: list[str]) -> str: ...
    def finish(self, w: CWriter, acc: str, doubled: bool | None = None) -> None: ...


class Arith(Sums, Protocol):
    """What a kernel family asks of its arithmetic (the module's docstring): ``Float32`` here,
    ``depthwise_quant.Int8`` beside the requantization it finishes with (the int8 package
    imports the float backend, so its record lives there); ``Sums``' fields and ``finish``
    besides."""

    acc: str  # the sum's C name
    declare: str  # the declaration of ``acc``
    bias: str  # the bias with nothing folded in (a loop over a window's taps starts from it)
    pair: int  # interior columns a group: 1, or the ISA's SIMD pairs
    loop_borders_above: int | None  # taps above which the border columns run in one loop

    def product(self, x: str, t: int) -> str: ...
    def pad(self, t: int) -> str | None: ...
    def init(self, k0: int, k1: int) -> str: ...
    def centered(self, x: str) -> str: ...


@dataclass(frozen=True)
class Float32:
    """float32 sums; the epilogue takes the sum as it is."""

    acc_type = "float"
    in_type = "float"
    w_type = "float"
    term_type = "float"
    zero = "0.0f"
    channels_per_term = 1  # each product its own term: the sums' order is the reference's

    @staticmethod
    def term(products: list[str]) -> str:
        return " + ".join(products)

    loop_channels = ""  # gcc's own choice: the float lanes loop vectorizes unrolled or not
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
