"""int8 Conv (not depthwise) for the ISAs with a matrix core (``IsaKernels.matrix_core``: Cortex-M):
im2col into a small int16 scratch (``im2col``), the ISA's register-blocked matrix tile, then TFLite's output
stage per value (bias, the one requantization helper, + z_y, clamp, the chain); Gemm/MatMul in
``gemm_mcu``.
Same integers as the layer-by-layer kernels of ``conv.py`` (docs/architecture.md, "int8 matrix
kernels on Cortex-M").

Chosen by ``conv.emit_conv8``/``emit_gemm8`` when the target's ISA record gives a matrix core
(``matrix_core``: ``[isa] int8_dot = "smlad"`` or ``"mve"``); other ISAs keep ``conv.py``'s
kernels, which suit vector units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims, who
from opfuse.backends.c.ctype import INT8, INT32, CType
from opfuse.backends.c.int8.chain import Chain8, clamp_span
from opfuse.backends.c.int8.common import (
    Requant,
    acc_bound,
    bias_array,
    int_ctype,
    quant,
    requant_arrays,
    rounding,
)
from opfuse.backends.c.int8.im2col import (
    INT16,
    Packing,
    emit_fill,
    order,
    reduction_rows,
)
from opfuse.backends.c.int8.mcu_tiles import (
    CONV_ROWS,
    columns,
    declare_scratch,
)
from opfuse.backends.c.int8.output import emit_output_value
from opfuse.backends.c.int8.residual import residual_add
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.isa.base import QUAD, padded
from opfuse.backends.c.rowsource import RowSource, ring_slot
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.quant import ONNX, conv_scales
from opfuse.targets.isa import Isa

# the output stage is written out per column (no loop, no array of sums: ~4 instructions fewer
# per value) for reductions up to this long, where it is a large share of the kernel; longer
# ones keep the loop, whose code is a sixth as large. Measured on vww_96_int8 (M7): every conv
# unrolled ran more instructions than up to 64 and grew the flash 1.7 KB; 64 grew it 0.4 KB;
# 16 (vww's 8- and 16-channel 1x1s) leaves room for the SMLAD core's paired quads
UNROLL_OUTPUT_KP = 16


def matrix_core(isa: Isa) -> bool:
    """Whether the ISA's int8 products are SMLAD pairs, which this core is built on (its record's
    ``int8_dot``, opfuse/targets/isa.py), or Helium's VMLADAV, whose ISA module gives its own
    cores for the same family (isa/mve), not the CPU's name."""
    return isa.int8_dot in ("smlad", "mve")


def uses_matrix_core(g: ConvGeom, params: Params) -> bool:
    """Whether a conv runs on the matrix core: SMLAD targets, every conv but the depthwise ones."""
    return matrix_core(params.store.isa) and not (g.group > 1 and g.icg == 1)


def uses_matrix_gemm(params: Params) -> bool:
    return matrix_core(params.store.isa)



def weights_int8(node: ir.Node, value: ir.Value) -> np.ndarray:
    arr = const(value)
    if arr is None:
        raise OpfuseError(f"C backend: {who(node)}: an int8 {node.op_type} needs constant weights")
    if np.any(quant(value, node, "weight").zero_point):
        raise OpfuseError(f"C backend: {who(node)}: weights with a nonzero zero point are not "
                          "emitted")
    return arr.astype(np.int64)


@dataclass(frozen=True)
class MatConv:
    """A conv laid out for the matrix core: its reduction order, padded length, weights, bias
    (the zero point folded in where there is no padding) and requantization, all in weights.c."""

    g: ConvGeom
    mode: str  # im2col.order
    kp: int
    weights: str
    bias: str
    rq: Requant
    zx: int  # the input's zero point: the fill's padding value (the bias holds -z_x sum w)
    zy: int
    yct: CType  # the conv's own output type
    cols: int  # output pixels per tile (scratch columns)
    isa: Isa  # the target's (its micro-kernels: opfuse/backends/c/isa)
    narrow: bool = False  # int8 input and the ISA has an int8 scratch core (IsaKernels.narrow)
    tail: int = 0  # a cascade row's last tile, narrower (a core of its own width): row_tiles

    @property
    def quads(self) -> int:
        """The scratch this conv needs (int64_t quads)."""
        return self.cols * self.kp // QUAD


def prepare(node: ir.Node, params: Params, g: ConvGeom, band: int,
            cascaded: bool = False) -> MatConv:
    """``band``: output pixels per band (the plane, or a cascade's row, ``cascaded``)."""
    xv, wv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    xq, wq, yq = quant(xv, node, "input"), quant(wv, node, "weight"), quant(yv, node, "output")
    if xq.scale.size != 1 or yq.scale.size != 1:
        raise OpfuseError(f"C backend: {who(node)}: activations must be quantized per tensor")
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    pads = attr(node, "pads")
    pointwise = (g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0)
                 and not any(pads[len(pads) // 2:] if pads else []))
    mode = order(g, pointwise)
    rows = reduction_rows(weights_int8(node, wv), g, mode)
    # pads hold z_x (im2col.py): sum (x - z_x) w = sum x w - z_x sum w over the whole window
    given = bias_array(node, 2, g.oc)
    bias = given - zx * rows.sum(axis=1)
    kp = padded(rows.shape[1])
    xct = int_ctype(xv, node)
    bound = acc_bound(rows, given, xct.lo, xct.hi, zx)
    cols, tail = columns(params, band, kp, cascaded)
    return MatConv(
        g, mode, kp,
        params.weight(f"{wv.name}:mat_{mode}", kernels(params.store.isa).matrix_weights(rows),
                      INT8),
        params.weight(f"{node.name}:mat_bias", bias.astype(np.int32), INT32),
        requant_arrays(params, node.name, conv_scales(xq, wq, yq, g.oc, rounding(params)),
                       bound),
        zx, zy, int_ctype(yv, node), cols, params.store.isa,
        xct.name == "int8_t" and kernels(params.store.isa).narrow is not None, tail)


def emit_band(w: CWriter, mc: MatConv, src: RowSource, xct: str, *, pixels: int,
              oh: str | None, out: Callable[[str], None], last: bool = False,
              vec: tuple | None = None) -> None:
    """Output pixels ``p0 + q`` (< ``pixels``) of row ``oh`` (None: of the whole plane, whose
    pixels are numbered row after row) of the group ``grp`` whose input rows ``src`` gives: im2col
    into ``col``, the core, and per value ``int32_t v`` of channel ``oc`` for ``out("q")``
    (``last``: no chain follows, see ``emit_output_value``). One fill loop, one core and one
    output loop whatever the shape, for a small flash: a last, partial tile repeats its last
    pixel, whose values are not stored."""
    g, cols, tail = mc.g, mc.cols, mc.tail
    ragged = pixels % cols != 0 and not tail
    w.open(f"for (int p0 = 0; p0 < {pixels}; p0 += {cols})")
    if tail:  # the row's last tile is narrower, its own core
        w(f"const int n = p0 < {pixels - tail} ? {cols} : {tail};")
    w.open(f"for (int q = 0; q < {'n' if tail else cols}; ++q)")
    w(f"const int pq = p0 + q < {pixels} ? p0 + q : {pixels - 1};" if ragged
      else "const int pq = p0 + q;")
    pix = (f"pq / {g.ow}", f"pq % {g.ow}") if oh is None and mc.mode != "pointwise" \
        else (oh, "pq")
    ks = kernels(mc.isa)
    nm = ks.narrow if mc.narrow else None  # the int8 scratch, its fill and core
    gather = nm.fill_gather if nm else ks.fill_gather
    # tiles in order: the column before holds the pixel to the left, but at a row's start (a
    # plane's pixels run row after row: where pq % OW is 0; a ragged last tile's repeated pixels
    # are not stored, whatever they copy); where the fill gathers in vectors (mve) copying saved
    # nothing (ResNet-8 on the M55 +3.5% instructions)
    if gather is not None or (ragged and oh is not None):
        reuse = None
    elif oh is None:
        reuse = (f"pq % {g.ow} != 0", f"q ? -1 : {cols - 1}")
    else:
        reuse = ("q > 0 || p0 > 0", f"q ? -1 : {cols - 1}")
    emit_fill(w, g, mc.mode, col="col", stride=cols, q="q", src=src, oh=pix[0], ow=pix[1],
              xct=xct, zx=mc.zx, gather=gather, pk=Packing(nm.quad, nm.pad) if nm else INT16,
              reuse=reuse)
    w.close()
    count = "n" if tail else \
        f"({pixels} - p0 < {cols} ? {pixels} - p0 : {cols})" if ragged else str(cols)
    ragged = ragged or bool(tail)
    w.open(f"for (int oc0 = grp*{g.ocg}; oc0 < grp*{g.ocg} + {g.ocg}; oc0 += {CONV_ROWS})")
    core = nm.core if nm else ks.matrix_core
    wrow = f"{mc.weights} + oc0*{mc.kp}"
    if not tail:
        core(w, rows=CONV_ROWS, cols=cols, stride=cols, kp=mc.kp, col="col", wrow=wrow)
    else:
        w(f"int32_t {', '.join(f'a{j}_{q} = 0' for j in range(CONV_ROWS) for q in range(cols))};")
        for width, test in ((cols, f"if (n == {cols})"), (tail, "else")):
            w.open(test)
            core(w, rows=CONV_ROWS, cols=width, stride=cols, kp=mc.kp, col="col", wrow=wrow,
                 declare=False)
            w.close()
    for j in range(CONV_ROWS):
        w.open("")
        w(f"const int oc = oc0 + {j};")
        w(f"const int32_t bj = {mc.bias}[oc];")
        if vec is None:
            _values(w, mc, j, cols, ragged, count, out, last)
        else:  # the ISA's vector output stage (where emit_conv_mcu proved it the same integers)
            onnx = mc.rq.mode == ONNX
            m, s = ("", "") if onnx else mc.rq.parts("oc")
            rounding_kw = {"scale": mc.rq.scale("oc"), "ranged": mc.rq.ranged} if onnx else {}
            kernels(mc.isa).store_tile(
                w, sums=[f"a{j}_{q}" for q in range(cols)], bias="bj", m=m, s=s, zy=mc.zy,
                lo=vec[1], hi=vec[2], dst=vec[0], count=count if ragged else None,
                scalar=lambda j=j: _values(w, mc, j, cols, ragged, count, out, last),
                fast=mc.rq.fast, **({"add": vec[3]} if len(vec) > 3 and vec[3] else {}),
                **rounding_kw)
        w.close()
    w.close()
    w.close()


def _values(w: CWriter, mc: MatConv, j: int, cols: int, ragged: bool, count: str,
            out: Callable[[str], None], last: bool) -> None:
    """The output stage of row ``j`` of the tile, value by value."""
    if mc.kp <= UNROLL_OUTPUT_KP:  # the sums stay in registers, no loop per value
        for q in range(cols):
            w.open(f"if ({q} < {count})" if ragged and q else "")
            w(f"const int q = {q};")
            emit_output_value(w, mc.rq, f"a{j}_{q} + bj", "oc", mc.zy, mc.yct, last, mc.isa)
            out("q")
            w.close()
    else:
        w(f"const int32_t acc[{cols}] = {{{', '.join(f'a{j}_{q}' for q in range(cols))}}};")
        w.open(f"for (int q = 0; q < {count}; ++q)")
        emit_output_value(w, mc.rq, "acc[q] + bj", "oc", mc.zy, mc.yct, last, mc.isa)
        out("q")
        w.close()


def vector_output(mc: MatConv, pre: list[ir.Node], params: Params) -> tuple[int, int] | None:
    """The output range where the ISA's vector output stage (``IsaKernels.store_tile``) gives
    this conv's integers: TFLite's or ONNX's requantization, int8 out, and a chain of clamps only
    (their ranges intersect); None elsewhere."""
    if kernels(mc.isa).store_tile is None or (mc.yct.lo, mc.yct.hi) != (-128, 127):
        return None
    return clamp_span(pre, params)


def emit_conv_mcu(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
                  g: ConvGeom, view: ir.Node | None = None) -> None:
    """A layer-by-layer conv: the whole plane, a band of every pixel per group. ``view``: the
    NHWC -> NCHW Transpose of a graph input the conv reads in place (fusion/views.py), its
    fill then addressing NHWC rows."""
    mc = prepare(node, params, g, g.oh * g.ow)
    xv, yv = node.inputs[0], node.outputs[0]
    xct, yct = int_ctype(xv, node), int_ctype((pre or [node])[-1].outputs[0], node)
    x = params.inp(xv, node) if view is None else params.inp(view.inputs[0], view)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    plane_in, plane_out = g.ih * g.iw, g.oh * g.ow

    def out(q: str) -> None:
        if chain is not None:
            hw = [f"(p0 + {q}) / {g.ow}", f"(p0 + {q}) % {g.ow}"]
            coords = ["n", "oc", *hw] if len(shape) == 4 else ["n", "oc", hw[1]]
            w(f"v = {chain.emit(w, 'v', coords)};")
        w(f"{y}[(n*{g.oc} + oc)*{plane_out} + p0 + {q}] = ({yct.name})v;")

    span = vector_output(mc, pre, params)
    vec = None if span is None else (f"{y} + (n*{g.oc} + oc)*{plane_out} + p0", *span)
    declare_scratch(w, params, mc.quads)
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int grp = 0; grp < {g.group}; ++grp)")
    if view is None:
        w(f"const {xct.name} *xg = {x} + (n*{g.c} + grp*{g.icg})*{plane_in};")
        src = RowSource("xg", g.iw, plane_in)
    else:
        w(f"const {xct.name} *xg = {x} + n*{g.c * plane_in} + grp*{g.icg};")
        src = RowSource.nhwc("xg", g.c, g.ih, g.iw)
    emit_band(w, mc, src, xct.name, pixels=plane_out, oh=None,
              out=out, last=chain is None, vec=vec)
    w.close()
    w.close()


def emit_rows_mcu(w: CWriter, node: ir.Node, params: Params, g: ConvGeom, *, xp: str,
                  rx: int | str, w_in: int, yp: str, ry: int | str, w_out: int, xct: str, yct: CType,
                  store: Callable[[str, str], None], epilogue: list | None = None,
                  nhwc: bool = False) -> None:
    """Output row ``r`` of a cascade member's conv (opfuse/backends/c/int8/cascade.py): its input
    rows from a ring of ``rx`` rows at ``xp``, each value ``store``d (the member's epilogue) into
    row ``r % ry`` of the ring at ``yp``; the same fill, core and output stage as the
    layer-by-layer conv, so the same integers at the same cost per pixel; ``epilogue``: the
    member's chain (``store``'s), for the ISA's vector output stage where it is clamps only;
    ``nhwc``: ``xp`` is a whole NHWC graph input read in place (the cascade's first member)."""
    mc = prepare(node, params, g, g.ow, cascaded=True)
    span = None if epilogue is None or (yct.lo, yct.hi) != (-128, 127) else \
        vector_output(mc, epilogue, params)
    add = None if span is not None or epilogue is None or vector_output(mc, [], params) is None \
        else residual_add(node.outputs[0], epilogue, params, f"r*{g.ow} + p0")
    if add is not None:  # the conv's own range, then the Add's (int8/residual.py)
        span = (-128, 127)
    row_ptr = f"{yp} + (oc*{ry} + ys)*{w_out}"  # ys: the output row's slot, formed once a row
    vec = None if span is None else (f"{row_ptr} + p0", *span, add)
    ring = None if rx == g.ih else rx
    # rows as a C argument (a member function shared by layers of one shape, int8/cascade.py)
    channel = rx * w_in if isinstance(rx, int) else f"{rx}*{w_in}"

    def out(q: str) -> None:
        w(f"{yct.name} *yr = {row_ptr};")
        store("oc", f"(p0 + {q})")

    declare_scratch(w, params, mc.quads)
    w(f"const int ys = {ring_slot('r', ry)};")
    w.open(f"for (int grp = 0; grp < {g.group}; ++grp)")
    if nhwc:
        w(f"const {xct} *xg = {xp} + grp*{g.icg};")
        src = RowSource.nhwc("xg", g.c, g.ih, g.iw)
    else:
        w(f"const {xct} *xg = {xp} + grp*{g.icg}*{channel};")
        bound = None if isinstance(rx, int) else g.ih * w_in  # a ring never holds more rows than x
        src = RowSource("xg", w_in, channel, ring, stride_max=bound)
    emit_band(w, mc, src, xct, pixels=g.ow, oh="r", out=out, vec=vec)
    w.close()
