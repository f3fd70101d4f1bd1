"""Reduction kernels: Softmax, LayerNormalization, ReduceMean/ReduceSum/ReduceMax/ReduceMin.

A reduction over a contiguous run of ``n`` elements keeps 8 partial sums (a host's softmax row 32,
``HOST_SOFTMAX_LANES``) so gcc can vectorize it without -ffast-math (a float reduction may not be
reordered otherwise).
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, collapse, contiguous, dims, flit, offset_expr, who
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.ops import groups

REDUCE_OPS = groups.C_REDUCE


def sum8(w: CWriter, out: str, n: int, expr: str) -> None:
    """``float out = sum_{i<n} expr(i)`` with 8 partial sums."""
    w("float s8[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};")
    w(f"for (int i = 0; i + 8 <= {n}; i += 8) for (int l = 0; l < 8; ++l) "
      f"s8[l] += {expr.replace('@', '(i + l)')};")
    w(f"float {out} = ((s8[0] + s8[1]) + (s8[2] + s8[3])) + ((s8[4] + s8[5]) + (s8[6] + s8[7]));")
    if n % 8:
        w(f"for (int i = {n - n % 8}; i < {n}; ++i) {out} += {expr.replace('@', 'i')};")




def softmax_row(w: CWriter, row: str, out: str, n: int, stride: int = 1, lanes: int = 8) -> str:
    """``out[i] = exp(row[i] - max(row))`` over ``n`` elements ``stride`` apart; returns the C
    name of their sum. Three loops that each vectorize: ``lanes`` running maxima (one would be a
    chain of selects gcc may not reorder), the branch-free exp (fastmath.py), and ``lanes``
    partial sums; the caller scales by 1 / sum. ``out`` may be ``row``. On the host 32 lanes
    (``HOST_SOFTMAX_LANES``: two AVX-512 vectors of independent maxima and sums) ran the three loops
    at 0.41 ns per element on 64 rows of 256 vs 0.65 with 8, 0.31 vs 0.45 on rows of 1500, 0.49 vs
    0.56 on rows of 197 (gcc 12 -O3 -march=native, Zen 4); 8 lanes elsewhere. A row shorter than
    the lanes takes the plain loops (Ultraface's 4420 rows of 2: 89.7 -> 4.5 us at native), the same
    floats."""
    at = (lambda i: f"{i}*{stride}") if stride != 1 else (lambda i: i)
    whole = n - n % lanes
    short = not whole  # a row shorter than the lanes: their running maxima and sums would all
    # start and stay at -inf and 0, so the plain loops give the same floats
    if short:
        w("float mx = -INFINITY;")
        w(f"for (int i = 0; i < {n}; ++i) mx = {row}[{at('i')}] > mx ? {row}[{at('i')}] : mx;")
    else:
        w(f"float mlane[{lanes}];")
        w(f"for (int l = 0; l < {lanes}; ++l) mlane[l] = -INFINITY;")
        w(f"for (int i = 0; i + {lanes} <= {n}; i += {lanes}) for (int l = 0; l < {lanes}; ++l) "
          f"mlane[l] = {row}[{at('(i + l)')}] > mlane[l] ? {row}[{at('(i + l)')}] : mlane[l];")
        w(f"for (int i = {whole}; i < {n}; ++i) mlane[0] = {row}[{at('i')}] > mlane[0] ? "
          f"{row}[{at('i')}] : mlane[0];")
        w("float mx = mlane[0];")
        w(f"for (int l = 1; l < {lanes}; ++l) mx = mlane[l] > mx ? mlane[l] : mx;")
    w(f"for (int i = 0; i < {n}; ++i) {out}[{at('i')}] = opfuse_expf({row}[{at('i')}] - mx);")
    if short:
        w("float sum = 0.0f;")
        w(f"for (int i = 0; i < {n}; ++i) sum += {out}[{at('i')}];")
    elif lanes == 8:
        sum8(w, "sum", n, f"{out}[{at('@')}]")
    else:
        w(f"float slane[{lanes}];")
        w(f"for (int l = 0; l < {lanes}; ++l) slane[l] = 0.0f;")
        w(f"for (int i = 0; i + {lanes} <= {n}; i += {lanes}) for (int l = 0; l < {lanes}; ++l) "
          f"slane[l] += {out}[{at('(i + l)')}];")
        w("float sum = 0.0f;")
        w(f"for (int l = 0; l < {lanes}; ++l) sum += slane[l];")
        if whole < n:
            w(f"for (int i = {whole}; i < {n}; ++i) sum += {out}[{at('i')}];")
    return "sum"


def emit_softmax(w: CWriter, node: ir.Node, params: Params, opset: int) -> None:
    xs = dims(node.inputs[0], node)
    axis = int(attr(node, "axis", -1 if opset >= 13 else 1)) % max(len(xs), 1)
    outer = math.prod(xs[:axis])
    if opset >= 13:
        n, inner = xs[axis], math.prod(xs[axis + 1 :])
    else:
        n, inner = math.prod(xs[axis:]), 1
    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    w.open(f"for (int o = 0; o < {outer}; ++o)")
    w.open(f"for (int q = 0; q < {inner}; ++q)")
    w(f"const float *xr = {x} + o*{n * inner} + q;")
    w(f"float *yr = {y} + o*{n * inner} + q;")
    total = softmax_row(w, "xr", "yr", n, inner, params.store.isa.softmax_lanes)
    w(f"const float inv = 1.0f / {total};")
    at = f"i*{inner}" if inner != 1 else "i"
    w(f"for (int i = 0; i < {n}; ++i) yr[{at}] *= inv;")
    w.close()
    w.close()


def emit_layernorm(w: CWriter, node: ir.Node, params: Params) -> None:
    xs = dims(node.inputs[0], node)
    for extra in node.outputs[1:]:
        if extra is not None and extra.name and (extra.consumers() or extra.is_graph_output()):
            raise OpfuseError(f"C backend: {who(node)}: its Mean/InvStdDev outputs are not emitted")
    axis = int(attr(node, "axis", -1)) % len(xs)
    eps = flit(attr(node, "epsilon", 1e-5))
    outer, n = math.prod(xs[:axis]), math.prod(xs[axis:])
    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    ops = []
    for i in (1, 2):
        value = node.inputs[i] if len(node.inputs) > i else None
        if value is None:
            ops.append(None)
            continue
        size = math.prod(dims(value, node))
        if size not in (1, n):
            raise OpfuseError(f"C backend: {who(node)}: scale/bias must cover the normalized dims")
        ptr = params.inp(value, node)
        ops.append(f"{ptr}[0]" if size == 1 else f"{ptr}[i]")
    w.open(f"for (int o = 0; o < {outer}; ++o)")
    w(f"const float *xr = {x} + o*{n};")
    w(f"float *yr = {y} + o*{n};")
    w.open("")
    sum8(w, "sum", n, "xr[@]")
    w(f"const float mean = sum * {flit(1.0 / n)};")
    w.open("")
    sum8(w, "sq", n, "(xr[@] - mean) * (xr[@] - mean)")
    w(f"const float rstd = 1.0f / sqrtf(sq * {flit(1.0 / n)} + {eps});")
    scale = f" * {ops[0]}" if ops[0] else ""
    bias = f" + {ops[1]}" if ops[1] else ""
    w(f"for (int i = 0; i < {n}; ++i) yr[i] = (xr[i] - mean) * rstd{scale}{bias};")
    w.close()
    w.close()
    w.close()


def emit_reduce(w: CWriter, node: ir.Node, params: Params) -> None:
    xs = dims(node.inputs[0], node)
    axes = attr(node, "axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = const(node.inputs[1])
        if arr is None:
            raise OpfuseError(f"C backend: {who(node)}: its axes must be a constant")
        axes = arr.ravel().tolist()
    if not axes:
        axes = [] if attr(node, "noop_with_empty_axes", 0) else list(range(len(xs)))
    red = sorted({int(a) % len(xs) for a in axes})
    keep = [d for d in range(len(xs)) if d not in red]
    st = contiguous(xs)
    oshape = [xs[d] for d in keep]
    rshape = [xs[d] for d in red]
    ost = contiguous(oshape)
    co, (cx, cy) = collapse(oshape, [[st[d] for d in keep], ost]) if keep else ([1], ([0], [0]))
    cr, (crs,) = collapse(rshape, [[st[d] for d in red]]) if red else ([1], ([0],))
    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    count = math.prod(rshape)
    op = node.op_type
    init = {"ReduceMax": "-INFINITY", "ReduceMin": "INFINITY"}.get(op, "0.0f")
    w.open("")
    outer = [f"o{d}" for d in range(len(co))]
    for d, size in enumerate(co):
        w.open(f"for (int o{d} = 0; o{d} < {size}; ++o{d})")
    w(f"const float *xb = {x} + {offset_expr(outer, cx)};")
    w(f"float acc = {init};")
    inner = [f"r{d}" for d in range(len(cr))]
    for d, size in enumerate(cr):
        w(f"for (int r{d} = 0; r{d} < {size}; ++r{d})")
    t = f"xb[{offset_expr(inner, crs)}]"
    if op == "ReduceMax":
        w(f"    {{ const float t = {t}; acc = (t > acc || t != t) ? t : acc; }}")  # NaN sticks
    elif op == "ReduceMin":
        w(f"    {{ const float t = {t}; acc = (t < acc || t != t) ? t : acc; }}")
    else:
        w(f"    acc += {t};")
    scale = f" * {flit(1.0 / max(count, 1))}" if op == "ReduceMean" else ""
    w(f"{y}[{offset_expr(outer, cy)}] = acc{scale};")
    for _ in co:
        w.close()
    w.close()
