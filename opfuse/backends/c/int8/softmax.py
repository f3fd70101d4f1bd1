"""int8 Softmax over the last axis.

``tflite``: TFLite Micro's int8 reference (output scale 1/256, zero point -128): input
differences from the row maximum, rescaled by beta * s_in into Q5.26, exp in fixed point, the
sum in Q12.19, its reciprocal by Newton-Raphson in Q2.29, then each exp times the reciprocal
with a rounding shift. The per-difference exp values (256 of them) are computed at generation
time (``fixedpoint``); the sum, reciprocal and output are computed in C as TFLite does.
``onnx``: dequantize, float softmax, quantize half to even.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims, flit, who
from opfuse.backends.c.ctype import INT32
from opfuse.backends.c.int8.common import int_ctype, quant, rounding
from opfuse.backends.c.int8.fixedpoint import softmax_tables
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.quant import ONNX, softmax_params

RECIPROCAL = r"""/* TFLite's GetReciprocal: 1 / x for x in Q12.19, as Q0.31 and a count of bits over one. */
static int32_t opfuse_reciprocal(int32_t x, int *bits_over_unit) {
    int clz = 0;
    uint32_t u = (uint32_t)x;
    while (clz < 32 && !(u & 0x80000000u)) { u <<= 1; ++clz; }
    *bits_over_unit = 12 - clz;
    {
        const int32_t a = (int32_t)(((uint32_t)x << clz) - 0x80000000u);
        const int64_t s = (int64_t)a + (int64_t)INT32_MAX;
        const int32_t half = (int32_t)((s + (s >= 0 ? 1 : -1)) / 2);
        int32_t xr = 1515870810 + opfuse_srdhm(half, -1010580540);
        int i;
        for (i = 0; i < 3; ++i) {
            const int32_t one_minus = (1 << 29) - opfuse_srdhm(half, xr);
            int32_t t = opfuse_srdhm(xr, one_minus);
            t = t > 536870911 ? INT32_MAX : (t < -536870911 ? INT32_MIN : (int32_t)((uint32_t)t << 2));
            xr = xr + t;
        }
        return xr > 1073741823 ? INT32_MAX : (xr < -1073741823 ? INT32_MIN : (int32_t)((uint32_t)xr << 1));
    }
}
"""


def emit_softmax8(w: CWriter, node: ir.Node, params: Params, opset: int) -> None:
    xv, yv = node.inputs[0], node.outputs[0]
    xs = dims(xv, node)
    axis = int(attr(node, "axis", -1 if opset >= 13 else 1)) % max(len(xs), 1)
    if axis != len(xs) - 1 and math.prod(xs[axis + 1 :]) != 1:
        raise OpfuseError(f"C backend: {who(node)}: an int8 Softmax over a non-last axis")
    depth = math.prod(xs[axis:])
    outer = math.prod(xs[:axis])
    xq, yq = quant(xv, node, "input"), quant(yv, node, "output")
    xct, yct = int_ctype(xv, node), int_ctype(yv, node)
    x, y = params.inp(xv, node), params.out(yv, node)
    w.open(f"for (int o = 0; o < {outer}; ++o)")
    w(f"const {xct.name} *xr = {x} + o*{depth};")
    w(f"{yct.name} *yr = {y} + o*{depth};")
    w("int32_t mx = xr[0];")
    w(f"for (int i = 1; i < {depth}; ++i) mx = xr[i] > mx ? xr[i] : mx;")
    if rounding(params) == ONNX:
        sx, sy, zy = float(xq.scale[0]), float(yq.scale[0]), int(yq.zero_point[0])
        w(f"float e[{depth}];")
        w("float sum = 0.0f;")
        w(f"for (int i = 0; i < {depth}; ++i) {{ e[i] = expf((float)(xr[i] - mx) * {flit(sx)}); "
          "sum += e[i]; }")
        w(f"for (int i = 0; i < {depth}; ++i) yr[i] = ({yct.name})opfuse_clamp("
          f"opfuse_quantize_f(e[i] / sum / {flit(sy)}) + {zy}, {yct.lo}, {yct.hi});")
        w.close()
        return
    if abs(float(yq.scale[0]) - 1.0 / 256) > 1e-9 or int(yq.zero_point[0]) != yct.lo:
        raise OpfuseError(f"C backend: {who(node)}: an int8 Softmax (TFLite) needs output scale "
                          "1/256 and zero point at the type's minimum")
    beta = 1.0
    m, ls, diff_min = softmax_params(beta, float(xq.scale[0]))
    exps, terms = softmax_tables(m, ls, diff_min, xct.lo, xct.hi)
    ex = params.weight(f"{node.name}:exp", exps, INT32)
    tm = params.weight(f"{node.name}:term", terms, INT32)
    w("int32_t sum = 0;")
    w(f"for (int i = 0; i < {depth}; ++i) sum += {tm}[mx - xr[i]];")
    w("int bits;")
    w("const int32_t scale = opfuse_reciprocal(sum, &bits);")
    w("const int ex = bits + 31 - 8;")
    w.open(f"for (int i = 0; i < {depth}; ++i)")
    w(f"const int32_t e = {ex}[mx - xr[i]];")
    w(f"yr[i] = ({yct.name})(e < 0 ? {yct.lo} : opfuse_clamp(opfuse_rdbpot(opfuse_srdhm(scale, e), "
      f"ex) + ({yct.lo}), {yct.lo}, {yct.hi}));")
    w.close()
    w.close()
