"""int8 Quantize/Dequantize and Concat (data movement itself is dtype-agnostic: layout.py).

* QuantizeLinear of float input: TFLite rounds x / s (float32) half away from zero (roundf);
  ONNX half to even (rintf); + z, saturate. Of an int8 input (TFLite's requantizing QUANTIZE):
  one multiplier s_in / s_out on (q - z_in), + z_out.
* DequantizeLinear: TFLite s * (q - z) in double, then float; ONNX (q - z) * s in float.
* Concat: a copy when every input has the output's parameters, else each input requantized.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims, flit, who
from opfuse.backends.c.ctype import FLOAT, ctype_of
from opfuse.backends.c.int8.common import int_ctype, quant, rescale_expr, rounding
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.layout import emit_concat
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.quant import ONNX, QuantParams, get_quant, make_params


def _params_of(node: ir.Node, value: ir.Value) -> QuantParams:
    """Quantization parameters from the value, else from the node's scale/zero-point inputs."""
    q = get_quant(value)
    if q is not None:
        return q
    scale = const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if scale is None:
        raise OpfuseError(f"C backend: {who(node)}: its scale must be a constant")
    zp_v = node.inputs[2] if len(node.inputs) > 2 else None
    zp = const(zp_v) if zp_v is not None else None
    axis = int(attr(node, "axis", 1)) if scale.size > 1 else None
    return make_params(scale, 0 if zp is None else zp, axis)


def _per_tensor(node: ir.Node, q: QuantParams) -> tuple[float, int]:
    if q.scale.size != 1:
        raise OpfuseError(f"C backend: {who(node)}: per-axis Quantize/Dequantize is not emitted")
    return float(q.scale[0]), int(q.zero_point[0])


def emit_quantize(w: CWriter, node: ir.Node, params: Params) -> None:
    xv, yv = node.inputs[0], node.outputs[0]
    yct = int_ctype(yv, node)
    s, z = _per_tensor(node, _params_of(node, yv))
    n = math.prod(dims(yv, node))
    x, y = params.inp(xv, node), params.out(yv, node)
    mode = rounding(params)
    xct = ctype_of(xv) or FLOAT
    if not xct.is_float:  # requantize
        si, zi = _per_tensor(node, quant(xv, node, "input"))
        expr = rescale_expr(mode, f"(int32_t){x}[i] - {zi}", si / s)
        w(f"for (int i = 0; i < {n}; ++i) {y}[i] = ({yct.name})opfuse_clamp({expr} + {z}, "
          f"{yct.lo}, {yct.hi});")
        return
    rnd = "rintf" if mode == ONNX else "roundf"
    w.open(f"for (int i = 0; i < {n}; ++i)")
    if rnd == "roundf" and kernels(params.store.isa).roundf_fraction:  # roundf exactly, vectorized
        w(f"const float v = {x}[i] / {flit(s)};")
        w("const float c = fabsf(v) > 1073741824.0f ? copysignf(1073741824.0f, v) : v;")
        w("const int32_t q = (int32_t)c;  /* truncf(c): |c| <= 2^30 */")
        w("const float d = c - (float)q;  /* exact */")
        w(f"{y}[i] = ({yct.name})opfuse_clamp(q + (d >= 0.5f) - (d <= -0.5f) + {z}, {yct.lo}, "
          f"{yct.hi});")
        w.close()
        return
    w(f"float r = {rnd}({x}[i] / {flit(s)});")
    w("r = r < -1073741824.0f ? -1073741824.0f : (r > 1073741824.0f ? 1073741824.0f : r);")
    w(f"{y}[i] = ({yct.name})opfuse_clamp((int32_t)r + {z}, {yct.lo}, {yct.hi});")
    w.close()


def emit_dequantize(w: CWriter, node: ir.Node, params: Params) -> None:
    xv, yv = node.inputs[0], node.outputs[0]
    int_ctype(xv, node)
    s, z = _per_tensor(node, _params_of(node, xv))
    n = math.prod(dims(yv, node))
    x, y = params.inp(xv, node), params.out(yv, node)
    if rounding(params) == ONNX:
        w(f"for (int i = 0; i < {n}; ++i) {y}[i] = (float)((int32_t){x}[i] - {z}) * {flit(s)};")
    else:
        w(f"for (int i = 0; i < {n}; ++i) {y}[i] = (float)({float(s)!r} * "
          f"(double)((int32_t){x}[i] - {z}));")


def emit_concat8(w: CWriter, node: ir.Node, params: Params) -> None:
    yv = node.outputs[0]
    yq = quant(yv, node, "output")
    if all(get_quant(v) == yq for v in node.inputs):
        emit_concat(w, node, params)
        return
    yct = int_ctype(yv, node)
    so, zo = _per_tensor(node, yq)
    out = dims(yv, node)
    axis = int(attr(node, "axis", 0)) % len(out)
    y = params.out(yv, node)
    outer = math.prod(out[:axis])
    out_chunk = math.prod(out[axis:])
    offset = 0
    for value in node.inputs:
        chunk = math.prod(dims(value, node)[axis:])
        if chunk:
            si, zi = _per_tensor(node, quant(value, node, "input"))
            x = params.inp(value, node)
            expr = rescale_expr(rounding(params), f"(int32_t){x}[o*{chunk} + i] - {zi}", si / so)
            w(f"for (int o = 0; o < {outer}; ++o) for (int i = 0; i < {chunk}; ++i) "
              f"{y}[o*{out_chunk} + {offset} + i] = ({yct.name})opfuse_clamp({expr} + {zo}, "
              f"{yct.lo}, {yct.hi});")
        offset += chunk


def _tflite_axis(out_len: int, in_len: int, ctm: str) -> tuple[list[int], list[int], list[int]]:
    """TFLite's integer bilinear source positions (10 fractional bits): (lower, upper, fraction)
    per output index, computed as its ResizeBilinearInteger does."""
    scale = ((1 << 10) * in_len + out_len // 2) // out_len
    if ctm == "align_corners" and out_len > 1:
        scale = ((1 << 10) * (in_len - 1) + (out_len - 1) // 2) // (out_len - 1)
    lo, hi, frac = [], [], []
    for o in range(out_len):
        v = o * scale + (scale // 2 - (1 << 9) if ctm == "half_pixel" else 0)
        low = max(int(v / (1 << 10)), 0)  # C division truncates toward zero
        high = min(int((v + (1 << 10) - 1) / (1 << 10)), in_len - 1)
        lo.append(low)
        hi.append(high)
        frac.append(v - (1 << 10) * low)
    return lo, hi, frac


def emit_resize_bilinear8(w: CWriter, node: ir.Node, params: Params) -> None:
    """int8 bilinear Resize of the two last dims: TFLite's RESIZE_BILINEAR integer arithmetic
    (10-bit source positions, the four products summed in 64 bits, rounded half away from zero
    by 2^20); ONNX rounding: dequantize, interpolate in float, quantize."""
    from opfuse.backends.c.layout import resize_scales, source_coord

    xv, yv = node.inputs[0], node.outputs[0]
    xs, ys = dims(xv, node), dims(yv, node)
    if len(xs) != 4 or xs[:2] != ys[:2]:
        raise OpfuseError(f"C backend: {who(node)}: an int8 bilinear Resize of a non-spatial dim")
    xq, yq = quant(xv, node, "input"), quant(yv, node, "output")
    xct, yct = int_ctype(xv, node), int_ctype(yv, node)
    ctm = attr(node, "coordinate_transformation_mode", "half_pixel")
    (ih, iw), (oh, ow) = xs[2:], ys[2:]
    x, y = params.inp(xv, node), params.out(yv, node)
    planes = xs[0] * xs[1]
    w.open("")
    if rounding(params) != ONNX:
        if xq != yq:
            raise OpfuseError(f"C backend: {who(node)}: an int8 bilinear Resize (TFLite) needs "
                              "the same quantization on its input and output")
        if ctm not in ("half_pixel", "align_corners", "asymmetric"):
            raise OpfuseError(f"C backend: {who(node)}: coordinate_transformation_mode '{ctm}' "
                              "has no TFLite integer form")
        for name, (lo, hi, frac) in (("h", _tflite_axis(oh, ih, ctm)),
                                     ("w", _tflite_axis(ow, iw, ctm))):
            w(f"static const int {name}0[{len(lo)}] = {{{', '.join(map(str, lo))}}};")
            w(f"static const int {name}1[{len(hi)}] = {{{', '.join(map(str, hi))}}};")
            w(f"static const int32_t {name}f[{len(frac)}] = {{{', '.join(map(str, frac))}}};")
        w.open(f"for (int p = 0; p < {planes}; ++p)")
        w(f"const {xct.name} *xp = {x} + p*{ih * iw};")
        w.open(f"for (int i = 0; i < {oh}; ++i)")
        w.open(f"for (int j = 0; j < {ow}; ++j)")
        w("const int64_t fy = hf[i], fx = wf[j];")
        w(f"const int64_t s = (int64_t)xp[h0[i]*{iw} + w0[j]] * (1024 - fy) * (1024 - fx)"
          f" + (int64_t)xp[h1[i]*{iw} + w0[j]] * fy * (1024 - fx)"
          f" + (int64_t)xp[h0[i]*{iw} + w1[j]] * (1024 - fy) * fx"
          f" + (int64_t)xp[h1[i]*{iw} + w1[j]] * fy * fx;")
        w(f"{y}[p*{oh * ow} + i*{ow} + j] = ({yct.name})((s + (s > 0 ? (1 << 19) : -(1 << 19)))"
          " / (1 << 20));")
    else:
        scales = resize_scales(node, xs, ys)
        tabs = []
        for d, (n_in, n_out) in enumerate(((ih, oh), (iw, ow))):
            lo, hi, f = [], [], []
            for o in range(n_out):
                c = min(max(source_coord(ctm, o, scales[2 + d], n_in, n_out), 0.0), n_in - 1)
                a = int(c)
                lo.append(a)
                hi.append(min(a + 1, n_in - 1))
                f.append(c - a)
            tabs.append((lo, hi, f))
        for name, (lo, hi, f) in zip(("h", "w"), tabs, strict=True):
            w(f"static const int {name}0[{len(lo)}] = {{{', '.join(map(str, lo))}}};")
            w(f"static const int {name}1[{len(hi)}] = {{{', '.join(map(str, hi))}}};")
            w(f"static const float {name}f[{len(f)}] = {{{', '.join(flit(v) for v in f)}}};")
        zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
        k = flit(float(xq.scale[0]) / float(yq.scale[0]))
        w.open(f"for (int p = 0; p < {planes}; ++p)")
        w(f"const {xct.name} *xp = {x} + p*{ih * iw};")
        w.open(f"for (int i = 0; i < {oh}; ++i)")
        w.open(f"for (int j = 0; j < {ow}; ++j)")
        w(f"const float a = (float)(xp[h0[i]*{iw} + w0[j]] - {zx}), "
          f"b = (float)(xp[h0[i]*{iw} + w1[j]] - {zx});")
        w(f"const float c = (float)(xp[h1[i]*{iw} + w0[j]] - {zx}), "
          f"d = (float)(xp[h1[i]*{iw} + w1[j]] - {zx});")
        w("const float top = a + (b - a) * wf[j], bot = c + (d - c) * wf[j];")
        w(f"{y}[p*{oh * ow} + i*{ow} + j] = ({yct.name})opfuse_clamp(opfuse_quantize_f("
          f"(top + (bot - top) * hf[i]) * {k}) + {zy}, {yct.lo}, {yct.hi});")
    w.close()
    w.close()
    w.close()
    w.close()
