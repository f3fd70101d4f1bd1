"""int8 anchors: Conv (general, grouped, depthwise with multiplier, 1x1) and Gemm/MatMul with
constant weights, TFLite's reference semantics: (x - z_x) * (w - z_w) summed in int32, + int32
bias, per-channel requantization, + z_y, clamp (the fused activation), then the int8 epilogue.

Layout NCHW (the IR's; docs/architecture.md "Layout of TFLite models"). Taps outside the input
contribute nothing (the input's zero point is TFLite's padding value); the valid kernel window of
each output pixel is computed once per pixel, so the tap loops have no tests. Weights are int8 in
weights.c, biases int32; a nonzero weight zero point is subtracted at generation time (int16).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, const, dims, who
from opfuse.backends.c.conv import conv_geom
from opfuse.backends.c.ctype import INT8, INT16, INT32
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import int_ctype, quant, requant_arrays, rounding
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.quant import conv_scales


def _weights(params: Params, node: ir.Node, value: ir.Value, arr: np.ndarray, axis_len: int,
             key: str, layout: np.ndarray) -> str:
    """Store constant weights (already in the kernel's layout), zero point subtracted."""
    wq = quant(value, node, "weight")
    zp = wq.zero_point.astype(np.int32)
    if not np.any(zp):
        return params.weight(key, layout.astype(np.int8) if arr.dtype == np.int8 else layout,
                             INT8 if arr.dtype == np.int8 else INT16)
    raise OpfuseError(f"C backend: {who(node)}: weights with a nonzero zero point are not emitted")


def _bias(params: Params, node: ir.Node, index: int, channels: int) -> str | None:
    v = node.inputs[index] if len(node.inputs) > index else None
    if v is None:
        return None
    arr = const(v)
    if arr is None:
        raise OpfuseError(f"C backend: {who(node)}: an int8 kernel needs a constant bias")
    if arr.dtype.kind not in "iu":
        raise OpfuseError(f"C backend: {who(node)}: an int8 kernel's bias must be int32")
    return params.weight(f"{v.name}:bias", np.broadcast_to(arr.ravel(), (channels,)), INT32)


def emit_conv8(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params) -> None:
    g = conv_geom(node)
    xv, wv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    arr = const(wv)
    if arr is None:
        raise OpfuseError(f"C backend: {who(node)}: an int8 Conv needs constant weights")
    xq, wq, yq = quant(xv, node, "input"), quant(wv, node, "weight"), quant(yv, node, "output")
    if xq.scale.size != 1 or yq.scale.size != 1:
        raise OpfuseError(f"C backend: {who(node)}: activations must be quantized per tensor")
    int_ctype(xv, node)
    yct = int_ctype(yv, node)
    k = g.icg * g.k[0] * g.k[1]
    wt = _weights(params, node, wv, arr, g.oc, f"{wv.name}:i8",
                  arr.reshape(g.oc, k))
    b = _bias(params, node, 2, g.oc)
    rq = requant_arrays(params, f"{node.name}", conv_scales(xq, wq, yq, g.oc, rounding(params)))
    x = params.inp(xv, node)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    last = (pre or [node])[-1].outputs[0]
    y = params.out(last, node)
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    (sh, sw), (dh, dw), (ph, pw) = g.s, g.d, g.p
    plane_in, plane_out = g.ih * g.iw, g.oh * g.ow
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int oc = 0; oc < {g.oc}; ++oc)")
    w(f"const int grp = oc / {g.ocg};")
    w(f"const int8_t *wc = {wt} + oc*{k};")
    w(f"const int8_t *xg = {x} + (n*{g.c} + grp*{g.icg})*{plane_in};")
    w(f"const int32_t bv = {b}[oc];" if b else "const int32_t bv = 0;")
    w(f"{yct.name} *yc = {y} + (n*{g.oc} + oc)*{plane_out};")
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
    w(f"const int ih0 = oh*{sh} - {ph};")
    w(f"const int kh0 = ih0 < 0 ? (-ih0 + {dh - 1}) / {dh} : 0;")
    w(f"const int khe = ({g.ih} - ih0 + {dh - 1}) / {dh};")
    w(f"const int kh1 = khe < {g.k[0]} ? khe : {g.k[0]};")
    w.open(f"for (int ow = 0; ow < {g.ow}; ++ow)")
    w(f"const int iw0 = ow*{sw} - {pw};")
    w(f"const int kw0 = iw0 < 0 ? (-iw0 + {dw - 1}) / {dw} : 0;")
    w(f"const int kwe = ({g.iw} - iw0 + {dw - 1}) / {dw};")
    w(f"const int kw1 = kwe < {g.k[1]} ? kwe : {g.k[1]};")
    w("int32_t acc = 0;")
    w.open(f"for (int ic = 0; ic < {g.icg}; ++ic)")
    w(f"const int8_t *xc = xg + ic*{plane_in};")
    w(f"const int8_t *wk = wc + ic*{g.k[0] * g.k[1]};")
    w.open("for (int kh = kh0; kh < kh1; ++kh)")
    w(f"const int8_t *xr = xc + (ih0 + kh*{dh})*{g.iw} + iw0;")
    w(f"const int8_t *wr = wk + kh*{g.k[1]};")
    w(f"for (int kw = kw0; kw < kw1; ++kw) acc += ((int32_t)xr[kw*{dw}] - {zx}) * wr[kw];")
    w.close()
    w.close()
    w(f"int32_t v = opfuse_clamp({rq('acc + bv', 'oc')} + {zy}, {yct.lo}, {yct.hi});")
    if chain is not None:
        coords = ["n", "oc", "oh", "ow"] if len(shape) == 4 else ["n", "oc", "ow"]
        v = chain.emit(w, "v", coords)
        w(f"v = {v};")
    w(f"yc[oh*{g.ow} + ow] = ({yct.name})v;")
    w.close()
    w.close()
    w.close()
    w.close()
    if yct is not INT8 or int_ctype(xv, node) is not INT8:
        _retype(w, yct.name)


def _retype(w: CWriter, name: str) -> None:
    """The template reads int8; rewrite its element types for uint8 tensors."""
    w.lines[:] = [line.replace("const int8_t *xg", f"const {name} *xg")
                  .replace("const int8_t *xc", f"const {name} *xc")
                  .replace("const int8_t *xr", f"const {name} *xr") for line in w.lines]


def emit_gemm8(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params) -> None:
    """Gemm (alpha = beta = 1, transA = 0) or MatMul with a constant 2-D B: y[m, n] over K."""
    av, bv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    arr = const(bv)
    if arr is None or arr.ndim != 2:
        raise OpfuseError(f"C backend: {who(node)}: an int8 {node.op_type} needs a constant 2-D B")
    tb = node.op_type == "Gemm" and int(attr(node, "transB", 0))
    if node.op_type == "Gemm" and (int(attr(node, "transA", 0))
                                   or float(attr(node, "alpha", 1.0)) != 1.0
                                   or float(attr(node, "beta", 1.0)) != 1.0):
        raise OpfuseError(f"C backend: {who(node)}: an int8 Gemm needs transA=0, alpha=beta=1")
    nk = arr if tb else arr.T
    n_out, k = nk.shape
    a_shape = dims(av, node)
    if a_shape[-1] != k:
        raise OpfuseError(f"C backend: {who(node)}: A's last dim is not B's K")
    rows = int(np.prod(a_shape[:-1])) if len(a_shape) > 1 else 1
    aq, bq, yq = quant(av, node, "input"), quant(bv, node, "weight"), quant(yv, node, "output")
    act = int_ctype(av, node)
    yct = int_ctype(yv, node)
    wt = _weights(params, node, bv, arr, n_out, f"{bv.name}:nk", np.ascontiguousarray(nk))
    b = _bias(params, node, 2, n_out) if node.op_type == "Gemm" else None
    rq = requant_arrays(params, node.name, conv_scales(aq, bq, yq, n_out, rounding(params)))
    a = params.inp(av, node)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    za, zy = int(aq.zero_point[0]), int(yq.zero_point[0])
    w.open(f"for (int m = 0; m < {rows}; ++m)")
    w(f"const {act.name} *ar = {a} + m*{k};")
    w.open(f"for (int j = 0; j < {n_out}; ++j)")
    w(f"const int8_t *br = {wt} + j*{k};")
    w(f"int32_t acc = {b + '[j]' if b else '0'};")
    w(f"for (int kk = 0; kk < {k}; ++kk) acc += ((int32_t)ar[kk] - {za}) * br[kk];")
    w(f"int32_t v = opfuse_clamp({rq('acc', 'j')} + {zy}, {yct.lo}, {yct.hi});")
    if chain is not None:
        if len(shape) == 2:
            coords = ["m", "j"]
        else:  # batched rows: the chain sees the output's own dims
            lead = list(shape[:-1])
            coords, rest = [], "m"
            for d in range(len(lead) - 1, -1, -1):
                coords.insert(0, f"({rest}) % {lead[d]}")
                rest = f"({rest}) / {lead[d]}"
            coords.append("j")
        v = chain.emit(w, "v", coords)
        w(f"v = {v};")
    w(f"{y}[m*{n_out} + j] = ({yct.name})v;")
    w.close()
    w.close()
