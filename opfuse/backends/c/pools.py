"""Pool kernels (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool) and their geometry, shared
with the anchor kernels that end in a pool (targets with ``anchor_pool``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, contiguous, dims, flit, offset_expr, who
from opfuse.backends.c.epilogue import Chain, build_chain, emit_apply
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ops.groups import C_POOLS

POOL_OPS = C_POOLS


def window(in_len: int, out_len: int, k: int, s: int, d: int, pad: int, o: int) -> tuple[int, int]:
    """The range [lo, hi) of outputs o' for which input o'*s - pad + o*d lies in [0, in_len)."""
    lo = max(0, -(-(pad - o * d) // s))
    hi = min(out_len, (in_len - 1 + pad - o * d) // s + 1)
    return lo, max(lo, hi)


def pads_for(node: ir.Node, ins: list[int], outs: list[int], ks, ss, ds) -> tuple[list, list]:
    """Begin and end pads per spatial dim (explicit, or from auto_pad)."""
    n = len(ins)
    auto = attr(node, "auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(n):
            total = max(0, (outs[i] - 1) * ss[i] + (ks[i] - 1) * ds[i] + 1 - ins[i])
            b = total // 2 if auto == "SAME_UPPER" else total - total // 2
            begin.append(b)
            end.append(total - b)
        return begin, end
    if auto == "VALID":
        return [0] * n, [0] * n
    pads = attr(node, "pads") or [0] * (2 * n)
    return list(pads[:n]), list(pads[n:])


@dataclass(frozen=True)
class PoolGeom:
    op: str  # "max" or "avg"
    n: int
    c: int
    ih: int
    iw: int
    oh: int
    ow: int
    k: tuple[int, int]
    s: tuple[int, int]
    d: tuple[int, int]
    p: tuple[int, int]  # begin pads (h, w)
    pe: tuple[int, int]  # end pads
    include_pad: bool

    def counts(self, axis: int) -> list[int]:
        """Window elements per output position along ``axis`` (0: h, 1: w) for AveragePool."""
        in_len, out_len = (self.ih, self.oh) if axis == 0 else (self.iw, self.ow)
        lo_b, hi_b = (-self.p[axis], in_len + self.pe[axis]) if self.include_pad else (0, in_len)
        out = []
        for o in range(out_len):
            start = o * self.s[axis] - self.p[axis]
            taps = [start + t * self.d[axis] for t in range(self.k[axis])]
            out.append(max(1, sum(lo_b <= t < hi_b for t in taps)))
        return out


def pool_geom(node: ir.Node, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> PoolGeom:
    if len(in_shape) not in (3, 4):
        raise OpfuseError(f"C backend: {who(node)}: only 1-D and 2-D pools are emitted")
    i4 = in_shape if len(in_shape) == 4 else (in_shape[0], in_shape[1], 1, in_shape[2])
    o4 = out_shape if len(out_shape) == 4 else (out_shape[0], out_shape[1], 1, out_shape[2])
    op = "max" if "Max" in node.op_type else "avg"
    if node.op_type.startswith("Global"):
        return PoolGeom(op, i4[0], i4[1], i4[2], i4[3], 1, 1, (i4[2], i4[3]), (1, 1), (1, 1),
                        (0, 0), (0, 0), False)
    nsp = len(in_shape) - 2
    ks = list(attr(node, "kernel_shape"))
    ss = list(attr(node, "strides") or [1] * nsp)
    ds = list(attr(node, "dilations") or [1] * nsp)
    pb, pe = pads_for(node, list(in_shape[2:]), list(out_shape[2:]), ks, ss, ds)
    if nsp == 1:
        ks, ss, ds, pb, pe = [1, *ks], [1, *ss], [1, *ds], [0, *pb], [0, *pe]
    include = bool(attr(node, "count_include_pad", 0))
    return PoolGeom(op, i4[0], i4[1], i4[2], i4[3], o4[2], o4[3], tuple(ks), tuple(ss), tuple(ds),
                    tuple(pb), tuple(pe), include)


# taps of a pooling row written one block each (their output range constant); a wider window
# loops over its taps: a 4000-wide MaxPool unrolled into a 1.2 MB model.c, 16000 wide kept gcc
# -O3 busy for over 15 minutes
UNROLLED_TAPS = 16


def _tap_loop(w: CWriter, g: PoolGeom, rows: int, pacc: str, src: str) -> None:
    """The taps of one input row in a run-time loop, each with the output range ``window``
    gives (C's division truncates, so the numerators' signs are tested first)."""
    (s, d, pad), iw, ow = (g.s[1], g.d[1], g.p[1]), g.iw, g.ow
    w.open(f"for (int pkw = 0; pkw < {g.k[1]}; ++pkw)")
    w(f"const int off = pkw*{d} - {pad};")
    w(f"const int lo = -off > 0 ? (-off + {s - 1}) / {s} : 0;")
    w(f"const int top = {iw - 1} - off;")
    w(f"const int hi = top < 0 ? lo : (top / {s} + 1 < {ow} ? top / {s} + 1 : {ow});")
    w.open(f"for (int j = 0; j < {rows}; ++j)")
    w.open("for (int i = lo; i < hi; ++i)")
    _accumulate(w, g, pacc, f"{src}[j][i*{s} + off]")
    w.close()
    w.close()
    w.close()


def _accumulate(w: CWriter, g: PoolGeom, pacc: str, tap: str) -> None:
    """``pacc[j][i]`` takes input ``tap``: its max (NaN in the window gives NaN, IEEE maximum,
    whatever its position) or its sum."""
    w(f"const float t = {tap};")
    if g.op == "max":
        w(f"{pacc}[j][i] = (t > {pacc}[j][i] || t != t) ? t : {pacc}[j][i];")
    else:
        w(f"{pacc}[j][i] += t;")


def emit_pool_row(
    w: CWriter, g: PoolGeom, rows: int, pacc: str, ph: str, load_row: Callable[[str], str],
    row_max: Callable[..., bool] | None = None,
) -> None:
    """Pool one output row ``ph`` of ``rows`` channels into ``pacc[rows][ow]``.

    ``load_row(ih)`` emits code that makes ``src[j][iw]`` hold input row ``ih`` of channel j and
    returns the C name of ``src``; ``row_max``: the ISA's MaxPool row (``IsaKernels.max_pool_row``)
    for one channel, this C in its ``#else``."""
    w(f"float {pacc}[{rows}][{g.ow}];")
    if (row_max is not None and rows == 1 and g.op == "max"
            and row_max(w, g, pacc, ph, load_row, lambda: _row(w, g, rows, pacc, ph, load_row))):
        return
    _row(w, g, rows, pacc, ph, load_row)


def _row(w: CWriter, g: PoolGeom, rows: int, pacc: str, ph: str,
         load_row: Callable[[str], str]) -> None:
    init = "-INFINITY" if g.op == "max" else "0.0f"
    w(f"for (int j = 0; j < {rows}; ++j) for (int i = 0; i < {g.ow}; ++i) {pacc}[j][i] = {init};")
    w.open(f"for (int pkh = 0; pkh < {g.k[0]}; ++pkh)")
    w(f"const int prow = {ph}*{g.s[0]} - {g.p[0]} + pkh*{g.d[0]};")
    w(f"if (prow < 0 || prow >= {g.ih}) continue;")
    src = load_row("prow")
    if g.k[1] > UNROLLED_TAPS:  # a wide window: one loop over its taps, not one block each
        _tap_loop(w, g, rows, pacc, src)
    for kw in range(g.k[1] if g.k[1] <= UNROLLED_TAPS else 0):
        lo, hi = window(g.iw, g.ow, g.k[1], g.s[1], g.d[1], g.p[1], kw)
        if lo >= hi:
            continue
        off = kw * g.d[1] - g.p[1]
        idx = f"i*{g.s[1]} + {off}" if g.s[1] != 1 else f"i + {off}"
        w.open(f"for (int j = 0; j < {rows}; ++j)")
        w.open(f"for (int i = {lo}; i < {hi}; ++i)")
        _accumulate(w, g, pacc, f"{src}[j][{idx}]")
        w.close()
        w.close()
    w.close()
    if g.op == "avg":
        ch, cw = g.counts(0), g.counts(1)
        w(f"static const float rw[{g.ow}] = {{{', '.join(flit(1.0 / c) for c in cw)}}};")
        w(f"static const float rh[{g.oh}] = {{{', '.join(flit(1.0 / c) for c in ch)}}};")
        w(f"for (int j = 0; j < {rows}; ++j) for (int i = 0; i < {g.ow}; ++i) "
          f"{pacc}[j][i] *= rh[{ph}] * rw[i];")


def emit_global(w: CWriter, g: PoolGeom, x: str, y_row: Callable[[], None]) -> None:
    """Global pools: one value per (n, c) into ``pacc[c]``; then ``y_row()`` stores row n."""
    hw = g.ih * g.iw
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w(f"float pacc[{g.c}];")
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    w(f"const float *xc = {x} + (n*{g.c} + c)*{hw};")
    if g.op == "avg":
        w("float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};")
        w(f"for (int i = 0; i + 8 <= {hw}; i += 8) for (int l = 0; l < 8; ++l) s[l] += xc[i + l];")
        w("float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));")
        w(f"for (int i = {hw - hw % 8}; i < {hw}; ++i) t += xc[i];")
        w(f"pacc[c] = t * {flit(1.0 / hw)};")
    else:
        w("float t = -INFINITY;")
        w(f"for (int i = 0; i < {hw}; ++i) t = (xc[i] > t || xc[i] != xc[i]) ? xc[i] : t;")
        w("pacc[c] = t;")
    w.close()
    y_row()
    w.close()


def emit_pool_kernel(w: CWriter, nodes: list[ir.Node], params: Params) -> None:
    """A pool kernel: the pool, then the epilogue ops the target let it absorb."""
    node = nodes[0]
    in_shape = dims(node.inputs[0], node)
    out_shape = dims(node.outputs[0], node)
    g = pool_geom(node, in_shape, out_shape)
    x = params.inp(node.inputs[0], node)
    last = nodes[-1].outputs[0]
    chain = build_chain(nodes[1:], out_shape, params, node.outputs[0].name)
    y = params.out(last, node)
    if node.op_type.startswith("Global"):
        groups = [[0], list(range(1, len(out_shape)))]
        vs = chain.view(groups)
        ys = [out_shape[1] * _rest(out_shape, 2), 1]

        def store() -> None:
            emit_apply(w, chain, vs, ["n", "0"], g.c, lambda i: f"pacc[{i}]",
                       lambda i: f"{y}[{offset_expr(['n', i], ys)}]")

        emit_global(w, g, x, store)
        return
    four = (g.n, g.c, g.oh, g.ow)
    chain4 = _chain4(chain, out_shape, four)
    vs = [o.strides for o in chain4.operands]
    ys = contiguous(four)
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    w.open(f"for (int ph = 0; ph < {g.oh}; ++ph)")
    xc = f"{x} + (n*{g.c} + c)*{g.ih * g.iw}"

    def load(ih: str) -> str:
        w(f"const float (*src)[{g.iw}] = (const float (*)[{g.iw}])({xc} + {ih}*{g.iw});")
        return "src"

    emit_pool_row(w, g, 1, "pacc", "ph", load, kernels(params.store.isa).max_pool_row)
    emit_apply(w, chain4, vs, ["n", "c", "ph", "0"], g.ow, lambda i: f"pacc[0][{i}]",
               lambda i: f"{y}[{offset_expr(['n', 'c', 'ph', i], ys)}]")
    w.close()
    w.close()
    w.close()


def _rest(shape: tuple[int, ...], start: int) -> int:
    n = 1
    for d in shape[start:]:
        n *= d
    return n


def _chain4(chain: Chain, shape: tuple[int, ...], four: tuple[int, ...]) -> Chain:
    """The chain's operand strides on a 4-D (n, c, h, w) view of a 3-D or 4-D output."""
    if len(shape) == 4:
        return chain
    from opfuse.backends.c.epilogue import Operand

    ops = [Operand(o.ptr, (o.strides[0], o.strides[1], 0, o.strides[2])) for o in chain.operands]
    return Chain(four, chain.steps, ops)
