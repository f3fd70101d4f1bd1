"""int8 depthwise conv (one input channel per group, multiplier 1), exact to TFLite's
``sum((x - z_x) * w) + bias`` (docs/architecture.md, "int8 in the IR"), with the ISA's SIMD pairs
where it has them. Layout NCHW: a channel's plane is contiguous, so horizontally adjacent inputs
share a word.

One output row of one channel is computed from ``KH`` input row pointers by the depthwise row
nest written once for both dtypes (dwrow.py, ``emit_row``, over ``arith.Int8``: the sums in int32,
``depthwise_quant``'s requantization as their finish): the layer-by-layer kernel
(``emit_depthwise8``) and a cascade member (``emit_depthwise_member``) call it, as the float
depthwise conv does on a scalar FPU. This module holds the int8 side: operands, the zero-point row,
the channel setup (folded biases, requantization constants, the ISA's packed weights). Arithmetic:

* the zero point is folded into the bias, ``bf = bias - z_x * sum(w)``, so an interior pixel sums
  plain ``x * w``; a tap row above or below the input reads a row of ``z_x`` bytes (``zrow``,
  in weights.c), which adds ``z_x * w`` and so exactly cancels its share of the fold (TFLite's
  padding contributes nothing);
* a pixel whose window leaves the row on the left or right (a few per row) sums the taps inside
  the row: for a 3x3 window with code per column and their zero point folded into a bias per
  window, for a larger one in one loop over those columns, ``bias + (x - z_x) * w`` (small code;
  ``dwrow.unrolled``);
* interior pixels go ``PAIR`` at a time, in groups whose tap rows are words of four bytes at
  even offsets (``row_schedule``: taps ``k`` and ``k + 2`` of a pixel pair on one word's even or
  odd bytes). The ISA's pairs (``IsaKernels.depthwise_pairs``: one SMLAD a pair on Armv7E-M)
  sum them so; the portable C sums the same integers tap by tap, in one loop over the row that
  a host compiler vectorizes;
* a row of groups steps one pointer per tap row; the ISA's fast requantization
  (``IsaKernels.fast_requant``) may take twice the sum, one shift fewer, with the output zero
  point in its rounding constant where ``dw_quant`` proved it fits; layers of one input zero
  point share a ``zrow``.
* an ISA's own row (``IsaKernels.depthwise_row``: isa/mve) replaces all that under its guard.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.ctype import INT8, INT32
from opfuse.backends.c.dwrow import emit_row, row_columns, row_pointers, unrolled
from opfuse.backends.c.int8 import common, depthwise_quant
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.depthwise_quant import DwQuant, Int8, dw_quant
from opfuse.backends.c.isa import IsaKernels, kernels
from opfuse.backends.c.tensors import Params
from opfuse.ir.values import const
from opfuse.kernelplan.conv8 import PAIR, ConvGeom
from opfuse.quant import TFLITE

# a cascade member's tap-row pointers are formed once and stepped from channel to channel for
# input rows up to this wide (or rows a function's argument), where forming them per channel is a
# large share of a row; on wider rows gcc hoisted the ring slots itself and the stepped pointers
# cost registers in the row loop (vww_96_int8 on cortex-m7: 48- and 24-wide members +17k stepped,
# 12-, 6- and 3-wide members -35k)
STEPPED_ROWS_WIDTH = 16


def zero_row(params: Params, g: ConvGeom, zx: int) -> str:
    """A row of ``z_x`` bytes, read in place of a tap row above or below the input: an earlier
    layer's row of the same ``z_x`` if it is as wide (a narrower row is its prefix), so the
    model's flash holds one per zero point, not one per width."""
    prefix = f"dw:zrow:{zx}:"
    widths = [int(k[len(prefix):].split(":")[0]) for k in params.store.blob.offsets
              if k.startswith(prefix)]
    width = min((x for x in widths if x >= g.iw), default=g.iw)
    return params.weight(f"{prefix}{width}", np.full(width, zx, np.int8), INT8)


def bias_classes(g: ConvGeom) -> set[tuple[int, int]]:
    """The (k0, k1) of the biases ``bk<k0>_<k1>`` the channel setup declares."""
    cols = row_columns(g, PAIR)
    out = {(k0, k1) for _, k0, k1 in cols.singles} if unrolled(Int8, g) else set()
    return out | {(0, g.k[1])} if cols.groups else out


def emit_channel_setup(w: CWriter, isa: IsaKernels, g: ConvGeom, weights: str, bias: str | None,
                       dq: DwQuant, folded: str | None = None) -> None:
    """Per channel ``c``: ``wc`` (its int8 taps), ``bk<k0>_<k1>`` (the bias with the zero point of
    the taps k0 .. k1 of every row folded in, or read from the table ``folded``: ``bk0_<KW>`` for
    the groups, the others for a column whose window leaves the row), its requantization
    constants and the ISA's packed weights for its pairs."""
    (kh_, kw_), groups = g.k, row_columns(g, PAIR).groups
    w(f"const int8_t *wc = {weights} + c*{kh_ * kw_};")
    if bias is not None:
        w(f"const int32_t bc = {bias}[c];" + (" (void)bc;" if folded else ""))
    for i, (k0, k1) in enumerate(classes := sorted(bias_classes(g))):
        terms = " + ".join(f"wc[{kh * kw_ + k}]" for kh in range(kh_) for k in range(k0, k1))
        bk = f"{folded}[c*{len(classes)} + {i}]" if folded else f"bc - {dq.zx}*({terms or 0})"
        w(f"const int32_t bk{k0}_{k1} = {bk};")
    rq = dq.rq
    if rq.mode == TFLITE:  # TFLite's MultiplyByQuantizedMultiplier, its parts per channel
        i = "0" if rq.scalar else "c"
        w(f"const int32_t qm = {rq.mult}[{i}], qs = {rq.shift}[{i}];")

        def general(w: CWriter) -> None:
            w("const int qls = qs > 0 ? qs : 0, qrs = qs > 0 ? 0 : -qs;" if dq.left_shift
              else "const int qrs = -qs;")
            w("const int32_t qmask = (int32_t)(((int64_t)1 << qrs) - 1), qthr = qmask >> 1;")

        fast = isa.fast_requant.constants if dq.fast else None
        (general if fast is None else partial(fast, dq=dq, portable=general))(w)
    if groups and isa.depthwise_pairs is not None:
        pairs = isa.depthwise_pairs
        pairs.weights(w, g, pairs.weights_guard)


def _isa_row(isa: IsaKernels, g: ConvGeom, dq: DwQuant,
             vrow: Callable | None) -> tuple[str, Callable] | None:
    """The ISA's whole row (``depthwise_quant.isa_row``) as ``dwrow.emit_row`` takes it."""
    if vrow is None:
        return None
    return isa.depthwise_row_guard, lambda w, store: vrow(
        w, g, store=store, doubled=dq.doubled, zx=dq.zx, biases=bias_classes(g))


def depthwise_weights(params: Params, wv: ir.Value, g: ConvGeom) -> str:
    """The taps [C][KH][KW] (int8): as the source holds them."""
    arr = const(wv).reshape(g.c, g.k[0] * g.k[1]).astype(np.int8)
    return params.weight(f"{wv.name}:dw", arr, INT8)


def _bias(params: Params, node: ir.Node, g: ConvGeom) -> str:
    """The bias (int32, as the source has it)."""
    return params.weight(f"{node.name}:bias", common.bias_array(node, 2, g.oc).astype(np.int32),
                         INT32)


def _operands(params: Params, node: ir.Node, g: ConvGeom,
              with_bias: bool = True) -> tuple[str, str | None, str, DwQuant]:
    """The weights, the bias (None: not ``with_bias``), the zero-point row and the quantization
    of a depthwise layer."""
    dq = dw_quant(params, node, g)
    bias = _bias(params, node, g) if with_bias else None
    return depthwise_weights(params, node.inputs[1], g), bias, zero_row(params, g, dq.zx), dq


def emit_depthwise8(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
                    g: ConvGeom) -> None:
    """The layer-by-layer kernel: every channel of every image, row by row (``emit_dw_row``)."""
    yv = node.outputs[0]
    yct = common.int_ctype(yv, node)
    weights, bias, zrow, dq = _operands(params, node, g)
    isa = kernels(params.store.isa)
    x = params.inp(node.inputs[0], node)
    chain = Chain8(pre, dims(yv, node), params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    plane_in, plane_out = g.ih * g.iw, g.oh * g.ow

    def out(col: str) -> None:
        if chain is not None:
            v = chain.emit(w, "v", ["n", "c", "oh", f"({col})"])
            w(f"v = {v};")
        w(f"yr[{col}] = ({yct.name})v;")

    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    w(f"const int8_t *xc = {x} + (n*{g.c} + c)*{plane_in};")
    vrow = depthwise_quant.isa_row(params, dq, pre, yct)
    emit_channel_setup(w, isa, g, weights, bias, dq)
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
    w(f"{yct.name} *yr = {y} + (n*{g.c} + c)*{plane_out} + oh*{g.ow};")
    emit_row(w, Int8(isa, dq, yct.lo, yct.hi), g, "oh", lambda ih: f"xc + {ih}*{g.iw}", zrow, out,
             isa.depthwise_pairs, _isa_row(isa, g, dq, vrow))
    w.close()
    w.close()
    w.close()


def emit_depthwise_member(w: CWriter, node: ir.Node, params: Params, g: ConvGeom, channel: str,
                          stride: int | str, row: Callable[[str], str], out_row: str,
                          store: Callable[[str, str], None], epilogue=None) -> None:  # noqa: ANN001
    """Output row ``r`` of every channel ``c`` for a cascade member
    (opfuse/backends/c/int8/cascade.py), with the same core as the layer-by-layer kernel:
    ``channel`` is the C pointer of input channel 0 (in a ring or a whole tensor), ``stride``
    the distance between channels (a C expression: the ring's rows are a function's argument),
    ``row(ih)`` of its row ``ih`` from ``xc``, ``out_row`` declares the output row's pointer
    ``yr``, and ``store(ch, col)`` writes ``v`` through the member's epilogue."""
    hct = common.int_ctype(node.outputs[0], node)
    weights, _, zrow, dq = _operands(params, node, g, with_bias=False)
    isa = kernels(params.store.isa)
    step = str(stride) if isinstance(stride, str) or g.iw <= STEPPED_ROWS_WIDTH else None

    # ``step`` (a function's ring rows are an argument, int8/cascade.py): the tap rows' pointers
    # formed once for every channel and stepped a channel at a time; formed per channel, each
    # cost Cortex-M7 a division by those rows (vww_96_int8: -75k instructions). Rows that are
    # constants stay per channel, gcc hoists their slots itself (stepped, cascade 1 ran +17k)
    w.open("")
    if step is not None:
        w(f"const int8_t *xc = {channel};")
        row_pointers(w, g, "r", row, zrow, "int8_t", step)
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    if step is None:
        w(f"const int8_t *xc = {channel} + c*{stride};")
    vrow = depthwise_quant.isa_row(params, dq, epilogue, hct)  # epilogue: the chain of store
    # the biases with the zero point folded in from a table, every ISA: a member's setup runs once
    # per output row of every channel (not once per channel), and on Cortex-M7 forming the three
    # sums of vww_96_int8's 3x3 taps there cost ~25 instructions a row-channel (13 depthwise
    # members: -176k of 13.11M instructions; the table +13 KB of flash, less the source biases
    # it replaces below: +8.7 KB)
    folded = depthwise_quant.folded_biases(params, node, g, dq.zx, bias_classes(g))
    # the source's bias only where something still reads it (a loop over the edge columns, the
    # ISA's row): vww_96_int8's members then keep no second bias table in flash (-5 KB)
    needed = not folded or vrow is not None or not unrolled(Int8, g)
    bias = _bias(params, node, g) if needed else None
    emit_channel_setup(w, isa, g, weights, bias, dq, folded=folded)
    w(f"{out_row};")
    emit_row(w, Int8(isa, dq, hct.lo, hct.hi), g, "r", None if step else row, zrow,
             lambda col: store("c", col), isa.depthwise_pairs, _isa_row(isa, g, dq, vrow))
    for kh in range(g.k[0] if step else 0):
        w(f"r{kh} += st{kh};")
    w.close()
    w.close()
