"""ConvTranspose kernel (2-D and 1-D, groups, dilations, explicit or computed pads), epilogue fused.

Written as a gather over output rows so the epilogue runs on a finished row before the single
store: output row ``oh`` receives input row ``ih = (oh + pad - kh*d) / s`` when that divides
exactly; within the row, input column ``iw`` lands on ``iw*s + kw*d - pad``.
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, contiguous, dims, offset_expr, who
from opfuse.backends.c.epilogue import build_chain, emit_apply
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError


def _pads(node: ir.Node, ins, outs, ks, ss, ds) -> list[int]:
    n = len(ins)
    pads = attr(node, "pads")
    if pads is not None and attr(node, "output_shape") is None:
        return list(pads[:n])
    out_pad = attr(node, "output_padding") or [0] * n
    begin = []
    for i in range(n):
        total = ss[i] * (ins[i] - 1) + out_pad[i] + (ks[i] - 1) * ds[i] + 1 - outs[i]
        total = max(total, 0)
        if attr(node, "auto_pad", "NOTSET") == "SAME_UPPER":
            begin.append(total // 2)
        else:
            begin.append(total - total // 2)
    return begin


def emit_conv_transpose(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params) -> None:
    xs, ws, ys = dims(node.inputs[0], node), dims(node.inputs[1], node), dims(node.outputs[0], node)
    if len(xs) not in (3, 4):
        raise OpfuseError(f"C backend: {who(node)}: only 1-D and 2-D ConvTranspose is emitted")
    nsp = len(xs) - 2
    ks = list(attr(node, "kernel_shape") or ws[2:])
    ss = list(attr(node, "strides") or [1] * nsp)
    ds = list(attr(node, "dilations") or [1] * nsp)
    pb = _pads(node, list(xs[2:]), list(ys[2:]), ks, ss, ds)
    if nsp == 1:
        xs, ys = (xs[0], xs[1], 1, xs[2]), (ys[0], ys[1], 1, ys[2])
        ks, ss, ds, pb = [1, *ks], [1, *ss], [1, *ds], [0, *pb]
    group = int(attr(node, "group", 1))
    n, c, ih, iw = xs
    oc, oh, ow = ys[1], ys[2], ys[3]
    icg, ocg = c // group, oc // group
    x = params.inp(node.inputs[0], node)
    wt = params.inp(node.inputs[1], node)
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    b = params.inp(bias, node) if bias is not None else None
    shape = dims(node.outputs[0], node)
    chain = build_chain(pre, shape, params, node.outputs[0].name)
    vs = [o.strides if len(shape) == 4 else (o.strides[0], o.strides[1], 0, o.strides[2])
          for o in chain.operands]
    y = params.out((pre or [node])[-1].outputs[0], node)
    yst = contiguous((n, oc, oh, ow))
    w.open(f"for (int n = 0; n < {n}; ++n)")
    w.open(f"for (int oc = 0; oc < {oc}; ++oc)")
    w(f"const int grp = oc / {ocg}, ocl = oc % {ocg};")
    w.open(f"for (int oh = 0; oh < {oh}; ++oh)")
    w(f"float acc[{ow}];")
    w(f"for (int i = 0; i < {ow}; ++i) acc[i] = {f'{b}[oc]' if b else '0.0f'};")
    w.open(f"for (int ic = 0; ic < {icg}; ++ic)")
    w(f"const int ci = grp*{icg} + ic;")
    w.open(f"for (int kh = 0; kh < {ks[0]}; ++kh)")
    w(f"const int t = oh + {pb[0]} - kh*{ds[0]};")
    w(f"if (t < 0 || t % {ss[0]} != 0 || t / {ss[0]} >= {ih}) continue;")
    w(f"const float *xr = {x} + ((n*{c} + ci)*{ih} + t / {ss[0]})*{iw};")
    w(f"const float *wr = {wt} + ((ci*{ocg} + ocl)*{ks[0]} + kh)*{ks[1]};")
    for kw in range(ks[1]):
        off = kw * ds[1] - pb[1]
        lo = max(0, -(off // ss[1]))  # ceil(-off / s)
        hi = min(iw, (ow - 1 - off) // ss[1] + 1)
        if lo < hi:
            w(f"for (int i = {lo}; i < {hi}; ++i) acc[i*{ss[1]} + {off}] += wr[{kw}] * xr[i];")
    w.close()
    w.close()
    emit_apply(w, chain, vs, ["n", "oc", "oh", "0"], ow, lambda i: f"acc[{i}]",
               lambda i: f"{y}[{offset_expr(['n', 'oc', 'oh', i], yst)}]")
    w.close()
    w.close()
    w.close()
