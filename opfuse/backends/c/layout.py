"""Data-movement kernels: Reshape family (views when the memory plan put input and output at the
same offset, else one memcpy), Transpose, Concat, Slice, Split, Expand, Pad, Resize.

Strided copies collapse adjacent dims whose strides allow it, so the innermost loop is as long as
possible; index tables (Pad reflect/edge, Resize nearest) are static const arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx_ir as ir

from opfuse.backends.c.cgen import (
    CWriter,
    attr,
    bcast_strides,
    collapse,
    contiguous,
    dims,
    flit,
    need_const,
    offset_expr,
    who,
)
from opfuse.backends.c.ctype import FLOAT, ctype_of
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.ops import groups
from opfuse.quant import get_quant, quantize_real
from opfuse.safe_text import for_comment

VIEW_OPS = groups.VIEWS


def strided_copy(w: CWriter, dst: str, src: str, shape: Sequence[int], src_strides: Sequence[int],
                 src_base: int = 0, dst_strides: Sequence[int] | None = None) -> None:
    """``dst[i...] = src[src_base + sum(i_d * src_strides[d])]`` over ``shape``."""
    if math.prod(shape) == 0:
        return
    dst_st = list(dst_strides) if dst_strides is not None else contiguous(shape)
    cs, (ss, ds) = collapse(shape, [src_strides, dst_st])
    loops = [f"i{d}" for d in range(len(cs))]
    w.open("")
    for d, size in enumerate(cs):
        w(f"for (int i{d} = 0; i{d} < {size}; ++i{d})")
    s_off = offset_expr(loops, ss)
    d_off = offset_expr(loops, ds)
    base = f"{src_base} + " if src_base else ""
    w(f"    {dst}[{d_off}] = {src}[{base}{s_off}];")
    w.close()


def emit_view(w: CWriter, node: ir.Node, params: Params) -> None:
    x_v, y_v = node.inputs[0], node.outputs[0]
    store = params.store
    n = math.prod(dims(y_v, node))
    if store.is_arena(x_v) and store.plan.offsets[x_v.name] == store.plan.offsets[y_v.name]:
        w(f"/* {node.op_type} '{for_comment(node.name)}': a view, the memory plan put its output on its input */")
        return
    x = params.inp(x_v, node)
    y = params.out(y_v, node)
    w(f"memcpy({y}, {x}, {n * _esize(y_v)}u);")


def _esize(value: ir.Value) -> int:
    """Bytes per element of ``value`` in the arena (float32 unless its dtype says otherwise)."""
    return (ctype_of(value) or FLOAT).size


def emit_transpose(w: CWriter, node: ir.Node, params: Params) -> None:
    xs = dims(node.inputs[0], node)
    perm = attr(node, "perm") or list(range(len(xs)))[::-1]
    st = contiguous(xs)
    out = [xs[p] for p in perm]
    strided_copy(w, params.out(node.outputs[0], node), params.inp(node.inputs[0], node), out,
                 [st[p] for p in perm])


def emit_expand(w: CWriter, node: ir.Node, params: Params) -> None:
    out = dims(node.outputs[0], node)
    st = bcast_strides(dims(node.inputs[0], node), out)
    strided_copy(w, params.out(node.outputs[0], node), params.inp(node.inputs[0], node), out, st)


def emit_concat(w: CWriter, node: ir.Node, params: Params) -> None:
    out = dims(node.outputs[0], node)
    axis = int(attr(node, "axis", 0)) % len(out)
    y = params.out(node.outputs[0], node)
    outer = math.prod(out[:axis])
    out_chunk = math.prod(out[axis:])
    offset = 0
    for value in node.inputs:
        shape = dims(value, node)
        chunk = math.prod(shape[axis:])
        if chunk:
            x = params.inp(value, node)
            w(f"for (int o = 0; o < {outer}; ++o) "
              f"memcpy({y} + o*{out_chunk} + {offset}, {x} + o*{chunk}, "
              f"{chunk * _esize(node.outputs[0])}u);")
        offset += chunk


def _slice_params(node: ir.Node, xs: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Start and step per dim."""
    if len(node.inputs) > 1:
        starts = need_const(node, 1, "starts").tolist()
        ends = need_const(node, 2, "ends").tolist()
        axes = need_const(node, 3, "axes").tolist() if len(node.inputs) > 3 and node.inputs[3] \
            else list(range(len(starts)))
        steps = need_const(node, 4, "steps").tolist() if len(node.inputs) > 4 and node.inputs[4] \
            else [1] * len(starts)
    else:
        starts, ends = attr(node, "starts"), attr(node, "ends")
        axes = attr(node, "axes") or list(range(len(starts)))
        steps = [1] * len(starts)
    begin = [0] * len(xs)
    step = [1] * len(xs)
    for s, e, a, t in zip(starts, ends, axes, steps, strict=True):
        a = int(a) % len(xs)
        lo, _, st = slice(int(s), int(e), int(t)).indices(xs[a])
        begin[a], step[a] = lo, st
    return begin, step


def emit_slice(w: CWriter, node: ir.Node, params: Params) -> None:
    xs = dims(node.inputs[0], node)
    begin, step = _slice_params(node, xs)
    st = contiguous(xs)
    base = sum(b * s for b, s in zip(begin, st, strict=True))
    strided_copy(w, params.out(node.outputs[0], node), params.inp(node.inputs[0], node),
                 dims(node.outputs[0], node), [t * s for t, s in zip(step, st, strict=True)], base)


def emit_split(w: CWriter, node: ir.Node, params: Params) -> None:
    xs = dims(node.inputs[0], node)
    axis = int(attr(node, "axis", 0)) % len(xs)
    st = contiguous(xs)
    x = params.inp(node.inputs[0], node)
    start = 0
    for out in node.outputs:
        shape = dims(out, node)
        if out.name and (out.consumers() or out.is_graph_output()):
            strided_copy(w, params.out(out, node), x, shape, st, start * st[axis])
        start += shape[axis]


def emit_pad(w: CWriter, node: ir.Node, params: Params) -> None:
    xs, ys = dims(node.inputs[0], node), dims(node.outputs[0], node)
    mode = attr(node, "mode", "constant")
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        pads = [int(p) for p in need_const(node, 1, "pads").tolist()]
        value = float(const(node.inputs[2]).ravel()[0]) if len(node.inputs) > 2 and \
            node.inputs[2] is not None else 0.0
        if len(node.inputs) > 3 and node.inputs[3] is not None:
            raise OpfuseError(f"C backend: {who(node)}: Pad with an axes input is not emitted")
    else:
        pads = list(attr(node, "pads"))
        value = float(attr(node, "value", 0.0))
    r = len(xs)
    begin = pads[:r]
    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    tables = []
    for d in range(r):
        idx = []
        for o in range(ys[d]):
            i = o - begin[d]
            if 0 <= i < xs[d]:
                idx.append(i)
            elif mode == "constant":
                idx.append(-1)
            elif mode == "edge":
                idx.append(min(max(i, 0), xs[d] - 1))
            elif mode == "reflect":
                period = 2 * (xs[d] - 1) or 1
                i = abs(i) % period
                idx.append(i if i < xs[d] else period - i)
            else:
                raise OpfuseError(f"C backend: {who(node)}: Pad mode '{mode}' is not emitted")
        tables.append(idx)
    emit_gather(w, y, x, ys, xs, tables, _pad_fill(node, value))


def _pad_fill(node: ir.Node, value: float) -> str:
    """The pad value as a C literal of the output's type: for a quantized output the constant
    is quantized (0.0 -> the zero point, TFLite's PAD); an integer constant is taken as is."""
    out = node.outputs[0]
    ct = ctype_of(out) or FLOAT
    if ct.is_float:
        return flit(value)
    q = get_quant(out)
    raw = const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if raw is not None and raw.dtype.kind in "iu":
        return ct.lit(int(raw.ravel()[0]))
    if q is None:
        return ct.lit(int(value))
    return ct.lit(min(max(quantize_real(value, q), ct.lo), ct.hi))


def _runs(table: Sequence[int]) -> list[tuple[int, int, int]]:
    """``table`` as runs ``(first output, length, first source)``: each all -1 (source -1) or
    consecutive sources."""
    runs: list[tuple[int, int, int]] = []
    for o, s in enumerate(table):
        if runs:
            first, length, src = runs[-1]
            if (s == -1 and src == -1) or (s != -1 and src != -1 and s == src + length):
                runs[-1] = (first, length + 1, src)
                continue
        runs.append((o, 1, s))
    return runs


RUNS = 3  # the runs of the innermost gathered dim written as copies and fills, at most


def emit_gather(w: CWriter, y: str, x: str, ys: Sequence[int], xs: Sequence[int],
                tables: Sequence[Sequence[int]], fill: str | None = None) -> None:
    """``y[o...] = x[t_0[o_0], t_1[o_1], ...]`` (``fill`` where any index is -1). Where the dims
    after the innermost gathered one are copied whole and its table is at most ``RUNS`` runs
    (a Pad's zeros, its rows, zeros), each run is one ``memcpy`` of contiguous elements or one
    fill loop instead of an element loop (mcunet_vww's input Pad, 80 x 240 bytes of rows:
    5.3 -> 0.4 us at -march=native, the model 1.012x)."""
    st = contiguous(xs)
    yst = contiguous(ys)
    w.open("")
    identity = [list(t) == list(range(len(t))) and len(t) == xs[d] for d, t in enumerate(tables)]
    d = max((e for e in range(len(ys)) if not identity[e]), default=-1)  # innermost gathered
    if d >= 0 and (fill is not None or -1 not in tables[d]) and len(_runs(tables[d])) <= RUNS:
        src = _open_dims(w, y, ys, st, tables, fill, identity, d)
        dst = offset_expr([f"i{e}" for e in range(d)], yst[:d])
        at = "" if dst == "0" else f"{dst} + "
        base = " + ".join(src) + " + " if src else ""
        for first, length, s in _runs(tables[d]):  # each run copies or fills whole dims after d
            n = length * yst[d]
            if s == -1:
                w(f"for (int z = 0; z < {n}; ++z) {y}[{at}{first * yst[d]} + z] = {fill};")
            else:
                w(f"memcpy(&{y}[{at}{first * yst[d]}], &{x}[{base}{s * st[d]}], "
                  f"{n} * sizeof {y}[0]);")
        opened = d
    else:
        src = ["0", *_open_dims(w, y, ys, st, tables, fill, identity, len(ys))]
        dst = offset_expr([f"i{e}" for e in range(len(ys))], yst)
        w(f"{y}[{dst}] = {x}[{' + '.join(src)}];")
        opened = len(ys)
    for _ in range(opened):
        w.close()
    w.close()


def _open_dims(w: CWriter, y: str, ys: Sequence[int], st: Sequence[int],
               tables: Sequence[Sequence[int]], fill: str | None, identity: list[bool],
               count: int) -> list[str]:
    """emit_gather's tables and loops over the first ``count`` dims (``st``: the input's
    strides), an output row whose index is -1 filled and skipped; returns each dim's source
    offset term. The caller closes the ``count`` loops."""
    yst = contiguous(ys)
    for e in range(count):
        if not identity[e]:
            w(f"static const int t{e}[{len(tables[e])}] = {{{', '.join(map(str, tables[e]))}}};")
    src = []
    for e in range(count):
        w.open(f"for (int i{e} = 0; i{e} < {ys[e]}; ++i{e})")
        idx = f"i{e}" if identity[e] else f"t{e}[i{e}]"
        if fill is not None and not identity[e] and -1 in tables[e]:
            w(f"const int s{e} = {idx};")
            w(f"if (s{e} < 0) {{ for (int z = 0; z < {yst[e]}; ++z) "
              f"{y}[{offset_expr([f'i{k}' for k in range(e + 1)], yst[: e + 1])} + z] = {fill}; "
              "continue; }")
            idx = f"s{e}"
        src.append(f"({idx})*{st[e]}")
    return src


def resize_scales(node: ir.Node, xs, ys) -> list[float]:
    idx = 2 if len(node.inputs) > 2 else 1
    arr = const(node.inputs[idx]) if len(node.inputs) > idx and node.inputs[idx] else None
    if arr is not None and arr.size == len(xs):
        return [float(s) for s in arr.ravel()]
    return [o / i for o, i in zip(ys, xs, strict=True)]


def source_coord(mode: str, o: int, scale: float, in_len: int, out_len: int) -> float:
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if out_len > 1 else 0.0
    if mode == "align_corners":
        return 0.0 if out_len == 1 else o * (in_len - 1) / (out_len - 1)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    raise OpfuseError(f"C backend: Resize coordinate_transformation_mode '{mode}' is not emitted")


def _nearest(x: float, how: str) -> int:
    if how == "floor":
        return math.floor(x)
    if how == "ceil":
        return math.ceil(x)
    frac = x - math.floor(x)
    if frac == 0.5:
        return math.floor(x) if how == "round_prefer_floor" else math.ceil(x)
    return round(x)


def emit_resize(w: CWriter, node: ir.Node, params: Params) -> None:
    xs, ys = dims(node.inputs[0], node), dims(node.outputs[0], node)
    mode = attr(node, "mode", "nearest")
    ctm = attr(node, "coordinate_transformation_mode", "half_pixel")
    scales = resize_scales(node, xs, ys)
    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    coords = [[source_coord(ctm, o, scales[d], xs[d], ys[d]) for o in range(ys[d])]
              for d in range(len(xs))]
    if mode == "nearest":
        how = attr(node, "nearest_mode", "round_prefer_floor")
        tables = [[min(max(_nearest(c, how), 0), xs[d] - 1) for c in coords[d]]
                  for d in range(len(xs))]
        emit_gather(w, y, x, ys, xs, tables)
        return
    if mode != "linear" or len(xs) < 2:
        raise OpfuseError(f"C backend: {who(node)}: Resize mode '{mode}' is not emitted")
    for d in range(len(xs) - 2):
        if xs[d] != ys[d]:
            raise OpfuseError(f"C backend: {who(node)}: linear Resize of a non-spatial dim")
    ih, iw, oh, ow = xs[-2], xs[-1], ys[-2], ys[-1]
    tab = []
    for d, n_in in ((0, ih), (1, iw)):
        lo, hi, f = [], [], []
        for c in coords[len(xs) - 2 + d]:
            c = min(max(c, 0.0), n_in - 1)
            a = int(math.floor(c))
            lo.append(a)
            hi.append(min(a + 1, n_in - 1))
            f.append(c - a)
        tab.append((lo, hi, f))
    w.open("")
    for name, (lo, hi, f) in zip(("h", "w"), tab, strict=True):
        w(f"static const int {name}0[{len(lo)}] = {{{', '.join(map(str, lo))}}};")
        w(f"static const int {name}1[{len(hi)}] = {{{', '.join(map(str, hi))}}};")
        w(f"static const float {name}f[{len(f)}] = {{{', '.join(flit(v) for v in f)}}};")
    planes = math.prod(xs[:-2])
    w.open(f"for (int p = 0; p < {planes}; ++p)")
    w(f"const float *xp = {x} + p*{ih * iw};")
    w(f"float *yp = {y} + p*{oh * ow};")
    w.open(f"for (int i = 0; i < {oh}; ++i)")
    w("const float *r0 = xp + h0[i]*" + str(iw) + ", *r1 = xp + h1[i]*" + str(iw) + ";")
    w("const float fy = hf[i];")
    w.open(f"for (int j = 0; j < {ow}; ++j)")
    w("const float top = r0[w0[j]] + (r0[w1[j]] - r0[w0[j]]) * wf[j];")
    w("const float bot = r1[w0[j]] + (r1[w1[j]] - r1[w0[j]]) * wf[j];")
    w(f"yp[i*{ow} + j] = top + (bot - top) * fy;")
    w.close()
    w.close()
    w.close()
    w.close()
