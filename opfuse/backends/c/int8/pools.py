"""int8 pools and means, TFLite's reference semantics (docs/architecture.md, "int8 in the IR").

* MaxPool: the largest valid tap (input and output share parameters), then the epilogue.
* AveragePool: the sum of the valid taps divided by their count, rounded half away from zero
  ((sum +- count/2) / count), as TFLite's AVERAGE_POOL_2D; with differing parameters, or ONNX
  rounding, dequantize-average-quantize in float (count_include_pad as the attribute says).
* ReduceMean and a GlobalAveragePool whose parameters differ: TFLite's MEAN, one multiplier
  s_in / s_out with 1/count folded in, applied to sum - z_in * count.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, contiguous, dims, flit, who
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import Requant, int_ctype, quant, rounding
from opfuse.backends.c.int8.output import requant_clamp
from opfuse.backends.c.pools import pool_geom
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.quant import ONNX, TFLITE, mean_multiplier


def _finish(w: CWriter, chain: Chain8 | None, coords: list[str], store: str, ct) -> None:
    v = "v"
    if chain is not None:
        v = chain.emit(w, "v", coords)
    w(f"{store} = ({ct.name}){v};")


def emit_pool8(w: CWriter, nodes: list[ir.Node], params: Params) -> None:
    node = nodes[0]
    xv, yv = node.inputs[0], node.outputs[0]
    xs, ys = dims(xv, node), dims(yv, node)
    g = pool_geom(node, xs, ys)
    xq, yq = quant(xv, node, "input"), quant(yv, node, "output")
    xct, yct = int_ctype(xv, node), int_ctype(yv, node)
    mode = rounding(params)
    same = xq == yq
    x = params.inp(xv, node)
    chain = Chain8(nodes[1:], ys, params, yv.name) if len(nodes) > 1 else None
    y = params.out(nodes[-1].outputs[0], node)
    if node.op_type == "GlobalAveragePool" and not (same and mode != ONNX):
        _mean(w, x, y, g.n * g.c, g.ih * g.iw, 1, xq, yq, mode, chain, yct,
              [f"(o) / {g.c}", f"(o) % {g.c}"] + ["0"] * (len(ys) - 2))
        return
    if g.op == "max" and not same:
        raise OpfuseError(f"C backend: {who(node)}: an int8 MaxPool needs the same quantization "
                          "on its input and output")
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    w(f"const {xct.name} *xc = {x} + (n*{g.c} + c)*{g.ih * g.iw};")
    w(f"{yct.name} *yc = {y} + (n*{g.c} + c)*{g.oh * g.ow};")
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
    w.open(f"for (int ow = 0; ow < {g.ow}; ++ow)")
    emit_pool_value8(w, g, xq, yq, xct.name, yct, mode, "oh", lambda ih: f"xc + {ih}*{g.iw}")
    coords = ["n", "c", "oh", "ow"] if len(ys) == 4 else ["n", "c", "ow"]
    _finish(w, chain, coords, f"yc[oh*{g.ow} + ow]", yct)
    for _ in range(4):
        w.close()


def emit_pool_value8(w: CWriter, g, xq, yq, xct: str, yct, mode: str, oh: str,  # noqa: ANN001
                     row) -> None:  # noqa: ANN001
    """``int32_t v``: the pool's output integer at (``oh``, ``ow``) over the valid taps of its
    window (``row(ih)``: the C pointer of input row ``ih`` of this channel). The pixel core of
    the layer-by-layer pool and of a cascade member (opfuse/backends/c/int8/cascade.py)."""
    same = xq == yq
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    sx, sy = float(xq.scale[0]), float(yq.scale[0])
    w(f"const int ih0 = {oh}*{g.s[0]} - {g.p[0]}, iw0 = ow*{g.s[1]} - {g.p[1]};")
    w("int32_t acc = " + ("-2147483647" if g.op == "max" else "0") + ", cnt = 0;")
    w.open(f"for (int kh = 0; kh < {g.k[0]}; ++kh)")
    w(f"const int ih = ih0 + kh*{g.d[0]};")
    w(f"if (ih < 0 || ih >= {g.ih}) continue;")
    w(f"const {xct} *xr = {row('ih')};")
    w.open(f"for (int kw = 0; kw < {g.k[1]}; ++kw)")
    w(f"const int iw = iw0 + kw*{g.d[1]};")
    w(f"if (iw < 0 || iw >= {g.iw}) continue;")
    if g.op == "max":
        w("if (xr[iw] > acc) acc = xr[iw];")
    else:
        w("acc += xr[iw];")
    w("++cnt;")
    w.close()
    w.close()
    if g.op == "max":
        w("int32_t v = acc;")
    elif same and mode != ONNX:
        w("if (cnt == 0) cnt = 1;")
        w("int32_t v = acc > 0 ? (acc + cnt / 2) / cnt : (acc - cnt / 2) / cnt;")
        w(f"v = opfuse_clamp(v, {yct.lo}, {yct.hi});")
    else:
        if g.include_pad:
            w(f"cnt = {g.k[0] * g.k[1]};")
        w("if (cnt == 0) cnt = 1;")
        w(f"int32_t v = opfuse_clamp(opfuse_quantize_f((float)(acc - {zx} * cnt) * "
          f"{flit(sx / sy)} / (float)cnt) + {zy}, {yct.lo}, {yct.hi});")


def _mean(w, x, y, outer: int, count: int, inner: int, xq, yq, mode, chain, yct,
          coords: list[str]) -> None:
    """y[o, q] = mean over r of x[o, r, q] (outer x count x inner), TFLite MEAN or ONNX."""
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    w.open(f"for (int o = 0; o < {outer}; ++o)")
    w.open(f"for (int q = 0; q < {inner}; ++q)")
    w("int32_t acc = 0;")
    w(f"for (int r = 0; r < {count}; ++r) acc += {x}[(o*{count} + r)*{inner} + q];")
    if mode == ONNX:
        k = float(xq.scale[0]) / float(yq.scale[0]) / count
        w(f"int32_t v = opfuse_clamp(opfuse_quantize_f((float)(acc - {zx * count}) * {flit(k)})"
          f" + {zy}, {yct.lo}, {yct.hi});")
    else:
        m, s = mean_multiplier(float(xq.scale[0]), float(yq.scale[0]), count)
        rq = Requant(TFLITE, "", "", True, literal=(m, s))
        w(f"int32_t v = {requant_clamp(rq, f'acc - {zx * count}', '0', zy, yct)};")
    _finish(w, chain, coords, f"{y}[o*{inner} + q]", yct)
    w.close()
    w.close()


def emit_reduce_mean8(w: CWriter, nodes: list[ir.Node], params: Params) -> None:
    node = nodes[0]
    xv, yv = node.inputs[0], node.outputs[0]
    xs = dims(xv, node)
    axes = attr(node, "axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = const(node.inputs[1])
        if arr is None:
            raise OpfuseError(f"C backend: {who(node)}: its axes must be a constant")
        axes = arr.ravel().tolist()
    red = sorted({int(a) % len(xs) for a in (axes or range(len(xs)))})
    if red != list(range(red[0], red[-1] + 1)):
        raise OpfuseError(f"C backend: {who(node)}: an int8 mean over non-adjacent axes")
    outer = math.prod(xs[: red[0]])
    count = math.prod(xs[red[0] : red[-1] + 1])
    inner = math.prod(xs[red[-1] + 1 :])
    xq, yq = quant(xv, node, "input"), quant(yv, node, "output")
    yct = int_ctype(yv, node)
    int_ctype(xv, node)
    x = params.inp(xv, node)
    ys = dims(yv, node)
    chain = Chain8(nodes[1:], ys, params, yv.name) if len(nodes) > 1 else None
    y = params.out(nodes[-1].outputs[0], node)
    coords: list[str] = []
    if chain is not None:  # the output's coordinates from the flat index o*inner + q
        flat = f"(o*{inner} + q)"
        st = contiguous(ys)
        coords = [f"({flat} / {s}) % {d}" for s, d in zip(st, ys, strict=True)]
    _mean(w, x, y, outer, count, inner, xq, yq, rounding(params), chain, yct, coords)

