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

from opfuse.backends.c.cgen import CWriter, attr, const, dims, flit, who
from opfuse.backends.c.ctype import FLOAT, ctype_of
from opfuse.backends.c.int8.common import int_ctype, quant, rescale_expr, rounding
from opfuse.backends.c.layout import emit_concat
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
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
