"""int8 MatMul of two activations (attention's ``Q @ K^T`` and ``P @ V`` after quantize_static),
batched and broadcast as numpy's matmul (docs/architecture.md, "int8 in the IR").

Both operands are quantized per tensor (``real = s * (q - z)``), so
``y[m, n] = s_a * s_b / s_y * sum_k (a[m, k] - z_a) * (b[k, n] - z_b) + z_y``: an int32
accumulator of zero-point-corrected products, then the one requantization of the model's
rounding (TFLite's fixed point or ONNX's float scale, ``int8/common.py``), the output offset and
the clamp, the same tail as every int8 anchor. B is read through its strides, so a runtime B
needs no packing; an epilogue chain (Chain8) may follow.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, bcast_strides, contiguous, dims, offset_expr, who
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import int_ctype, quant, requant_arrays, rounding
from opfuse.backends.c.int8.output import requant_clamp
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.quant import conv_scales


def emit_matmul_act8(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params) -> None:
    av, bv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    a_shape, b_shape = dims(av, node), dims(bv, node)
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise OpfuseError(f"C backend: {who(node)}: an int8 MatMul of two activations needs "
                          "operands of rank >= 2")
    aq, bq, yq = quant(av, node, "input"), quant(bv, node, "input"), quant(yv, node, "output")
    if aq.scale.size != 1 or bq.scale.size != 1:
        raise OpfuseError(f"C backend: {who(node)}: an int8 MatMul of two activations needs "
                          "per-tensor quantization of both")
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    shape = dims(yv, node)
    if shape != (*batch, m, n):
        raise OpfuseError(f"C backend: {who(node)}: unexpected output shape {list(shape)}")
    a_st = bcast_strides(a_shape, (*batch, m, k))
    b_st = bcast_strides(b_shape, (*batch, k, n))
    act, bct, yct = int_ctype(av, node), int_ctype(bv, node), int_ctype(yv, node)
    rq = requant_arrays(params, node.name, conv_scales(aq, bq, yq, 1, rounding(params)))
    a, b = params.inp(av, node), params.inp(bv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    za, zb, zy = int(aq.zero_point[0]), int(bq.zero_point[0]), int(yq.zero_point[0])
    coords = [f"b{d}" for d in range(len(batch))]
    for d, size in enumerate(batch):
        w.open(f"for (int b{d} = 0; b{d} < {size}; ++b{d})")
    w.open(f"for (int m = 0; m < {m}; ++m)")
    w(f"const {act.name} *ar = {a} + {offset_expr([*coords, 'm'], a_st[:-1])};")
    w(f"const {bct.name} *bb = {b} + {offset_expr(coords, b_st[:-2])};")
    w.open(f"for (int j = 0; j < {n}; ++j)")
    w("int32_t acc = 0;")
    w(f"for (int kk = 0; kk < {k}; ++kk) acc += ((int32_t)ar[kk*{a_st[-1]}] - {za}) * "
      f"((int32_t)bb[kk*{b_st[-2]} + j*{b_st[-1]}] - {zb});")
    w(f"int32_t v = {requant_clamp(rq, 'acc', '0', zy, yct)};")
    if chain is not None:
        w(f"v = {chain.emit(w, 'v', [*coords, 'm', 'j'])};")
    row = offset_expr([*coords, "m"], contiguous(shape)[:-1])
    w(f"{y}[{row} + j] = ({yct.name})v;")
    w.close()
    w.close()
    for _ in batch:
        w.close()
