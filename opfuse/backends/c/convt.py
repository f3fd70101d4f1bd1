"""ConvTranspose kernel (2-D and 1-D, groups, dilations, explicit or computed pads), epilogue fused:
sub-pixel phases as pointwise.py's column tiles (kernelplan/convt.py has the index algebra).

Per image and output row group ``qh``: a line buffer of every input row the row phases read,
each channel's row zero-padded (or, where no phase reads outside the input, the input rows in
place); then each row phase ``rh`` (output row ``qh*sh + rh``) and column phase ``rw`` runs the
column tiles of its taps over it, summing its columns ``qw`` (output columns ``qw*sw + rw``),
and applies the epilogue chain to each tile's sums before the one (strided) store. A phase no
tap reaches stores the bias through the chain. Phases of one count whose taps differ by a shift
only (every phase where the stride divides the kernel) share one tile in the C, looped over with
tables of their rows, columns and weights: one tile per phase took 1.6-4.7x the code. The
weights are packed per phase at build time (``[group][block][ICg][taps][lanes]``,
convdirect.pack_weights, the taps the phase's), or, when they are a runtime input, into a stack
copy at the kernel's start. With one output channel a group the column phases are the tile's
lanes (kernelplan/convt.py, ``merged``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.arith import FLOAT32, Sums
from opfuse.backends.c.cgen import CWriter, attr, dims, who
from opfuse.backends.c.convdirect import pack_weights
from opfuse.backends.c.epilogue import build_chain, emit_apply
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.linebuffer import phase_copy
from opfuse.backends.c.pointwise import ColumnTile, column_tiles, open_channels
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.kernelplan.convt import AxisPhase, TransposePlan, live, plan_convt, transpose_geom


def convt_geom(node: ir.Node) -> ConvGeom:
    """The ConvTranspose's geometry, 1-D as a height of 1 (``c``: input channels)."""
    xs, ws, ys = dims(node.inputs[0], node), dims(node.inputs[1], node), dims(node.outputs[0], node)
    if len(xs) not in (3, 4):
        raise OpfuseError(f"C backend: {who(node)}: only 1-D and 2-D ConvTranspose is emitted")
    nsp = len(xs) - 2
    ks = list(attr(node, "kernel_shape") or ws[2:])
    ss = list(attr(node, "strides") or [1] * nsp)
    ds = list(attr(node, "dilations") or [1] * nsp)
    group = int(attr(node, "group", 1))
    if group < 1 or xs[1] % group or ys[1] % group or \
            tuple(ws) != (xs[1], ys[1] // group, *ks[-nsp:]):
        raise OpfuseError(f"C backend: {who(node)}: weight shape {list(ws)} does not match "
                          f"kernel_shape {ks[-nsp:]}, group {group}, {xs[1]} input and "
                          f"{ys[1]} output channels")
    return transpose_geom(list(xs), list(ys), ks, ss, ds, attr(node, "pads"),
                          attr(node, "output_shape") is not None, attr(node, "output_padding"),
                          attr(node, "auto_pad", "NOTSET"), group)


def _phase_weights(node: ir.Node, g: ConvGeom, plan: TransposePlan, params: Params,
                   w: CWriter) -> dict[tuple[int, int], str]:
    """Each live phase's packed weights (module docstring): constants packed here, a runtime
    input packed by C into a stack array before the loops."""
    blocks = -(-g.ocg // plan.lanes)
    blocks_of = [(b * plan.lanes, min(plan.lanes, g.ocg - b * plan.lanes), plan.lanes)
                 for b in range(blocks)]
    arr = const(node.inputs[1])
    out: dict[tuple[int, int], str] = {}
    phases = [(a, b) for a in live(plan.rows) for b in live(plan.cols)]
    if arr is not None:  # ONNX's [C][OCg][KH][KW] as a conv's [OC][ICg][KH][KW]
        conv = (np.asarray(arr, np.float32).reshape(g.group, g.icg, g.ocg, *g.k)
                .transpose(0, 2, 1, 3, 4).reshape(g.oc, g.icg, *g.k))
        if plan.merged:  # lane r: column phase r's weight at each offset of the union, or 0
            union = _union(plan)
            for a in live(plan.rows):
                packed = np.zeros((g.group, g.icg, len(a.taps), len(union), plan.lanes),
                                  np.float32)
                for b in live(plan.cols):
                    for kb, e in b.taps:
                        packed[..., union.index(e), b.r] = conv[:, :, [k for k, _ in a.taps], kb]
                out[a.r, 0] = params.weight(f"{node.inputs[1].name}#convt_phases_{a.r}",
                                            packed.ravel())
            return out
        for a, b in phases:
            sub = conv[:, :, [k for k, _ in a.taps]][:, :, :, [k for k, _ in b.taps]]
            packed, _ = pack_weights(sub, g.group, blocks_of)
            out[a.r, b.r] = params.weight(
                f"{node.inputs[1].name}#convt{plan.lanes}_{a.r}_{b.r}", packed)
        return out
    src = params.inp(node.inputs[1], node)
    kk = g.k[0] * g.k[1]
    total = sum(g.group * blocks * g.icg * len(a.taps) * len(b.taps) * plan.lanes
                for a, b in phases)
    w(f"float wpk[{total}];")
    at = 0
    for a, b in phases:
        taps = [ka * g.k[1] + kb for ka, _ in a.taps for kb, _ in b.taps]
        w.open(f"for (int grp = 0; grp < {g.group}; ++grp) for (int ob = 0; ob < {blocks}; ++ob) "
               f"for (int j = 0; j < {g.icg}; ++j) for (int o = 0; o < {plan.lanes}; ++o)")
        w(f"const int cl = ob*{plan.lanes} + o;")
        w(f"float *d = wpk + {at} + ((grp*{blocks} + ob)*{g.icg} + j)*{len(taps) * plan.lanes} + o;")
        w(f"const float *s = {src} + ((grp*{g.icg} + j)*{g.ocg} + cl)*{kk};")
        w(" ".join(f"d[{t * plan.lanes}] = cl < {g.ocg} ? s[{k}] : 0.0f;"
                   for t, k in enumerate(taps)))
        w.close()
        out[a.r, b.r] = f"(wpk + {at})"
        at += g.group * blocks * g.icg * len(taps) * plan.lanes
    return out


def _union(plan: TransposePlan) -> list[int]:
    """The input offsets any column phase reads (a merged tile's column taps)."""
    return sorted({e for b in live(plan.cols) for _, e in b.taps})


def _bias(node: ir.Node, g: ConvGeom, lanes: int, params: Params, empty: bool,
          merged: bool = False) -> tuple[str | None, str | None]:
    """The tiles' bias (zero-padded per block where constant) and, where a phase no tap
    reaches stores it (``empty``), the bias by channel."""
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if bias is None:
        return None, None
    value = const(bias)
    by_channel = params.inp(bias, node) if empty or value is None else None
    if value is None:  # plan_convt gives lanes dividing the group's channels
        return by_channel, by_channel
    blocks = -(-g.ocg // lanes)
    padded = np.zeros((g.group, blocks * lanes), np.float32)
    padded[:, :g.ocg] = np.asarray(value, np.float32).reshape(g.group, g.ocg)
    if merged:  # every lane (a column phase) the group's one channel
        padded = np.repeat(np.asarray(value, np.float32).reshape(g.group, 1), lanes, axis=1)
    return params.weight(f"{bias.name}#convt{lanes}", padded.ravel()), by_channel


@dataclass(frozen=True)
class PhaseArith:
    """What a dtype gives the phase nest (``emit_phases``): the tiles' sums (arith.Sums), the
    line buffer's element type and padding value, each phase's bias pointer (``(rh, rw)``; None:
    zeros) and ``store(tile, width, columns)``, a tile's finish: its sums of output row ``oh``,
    column phase ``rw`` and columns ``c0 + i0 ..`` (``columns`` of them stored) through the
    epilogue into the output; ``merged``: the store of a merged tile (float)."""

    sums: Sums
    ctype: str
    pad: str
    biases: dict
    store: Callable[[ColumnTile, int, int], None]
    merged: Callable[[ColumnTile, int], None] | None = None


def emit_conv_transpose(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params) -> None:
    g = convt_geom(node)
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] is not None else None
    plan = plan_convt(g, bias is None or const(bias) is not None,
                      const(node.inputs[1]) is not None)
    x = params.inp(node.inputs[0], node)
    shape = dims(node.outputs[0], node)
    chain = build_chain(pre, shape, params, node.outputs[0].name)
    y = params.out((pre or [node])[-1].outputs[0], node)
    empty = empty_phases(plan)
    bp, by_channel = _bias(node, g, plan.lanes, params, bool(empty), plan.merged)
    wps = _phase_weights(node, g, plan, params, w)
    four = [o.strides if len(shape) == 4 else (o.strides[0], o.strides[1], 0, o.strides[2])
            for o in chain.operands]
    sw = g.s[1]
    # a phase's columns as a view of the output: (n, c, oh, rw, q), q's stride sw columns
    vs = [(*s[:3], s[3], s[3] * sw) for s in four]
    ys = (g.oc * g.oh * g.ow, g.oh * g.ow, g.ow, 1, sw)

    def store(tile: ColumnTile, width: int, count: int) -> None:
        open_channels(w, tile)
        emit_apply(w, chain, vs, ["n", "c", "oh", "rw", "c0 + i0"], min(width, count),
                   lambda i: f"acc[o][{i}]", lambda i: f"{y}[{_out(ys, 'rw', f'c0 + i0 + {i}')}]")
        w.close()

    def merged(tile: ColumnTile, width: int) -> None:  # lane o: column phase o (_merged)
        w.open(f"for (int o = 0; o < {sw}; ++o)")
        w("const int c = grp;")
        w(f"const int left = ({g.ow} - o + {sw - 1})/{sw} - (c0 + i0);")
        emit_apply(w, chain, vs, ["n", "c", "oh", "o", "c0 + i0"],
                   f"(left < {width} ? left : {width})", lambda i: f"acc[o][{i}]",
                   lambda i: f"{y}[{_out(ys, 'o', f'c0 + i0 + {i}')}]")
        w.close()

    def empty_store(rw: int, count: int) -> None:  # a phase no tap reaches: the bias
        w.open(f"for (int c = 0; c < {g.oc}; ++c)")
        emit_apply(w, chain, vs, ["n", "c", "oh", str(rw), "0"], count,
                   lambda i: f"{by_channel}[c]" if by_channel else "0.0f",
                   lambda i: f"{y}[{_out(ys, rw, i)}]")
        w.close()

    keys = [(a.r, 0) for a in live(plan.rows)] if plan.merged else list(wps)
    spec = PhaseArith(FLOAT32, "float", "0.0f", {k: bp for k in keys}, store, merged)
    emit_phases(w, g, plan, x, wps, spec, params, empty_store)


def empty_phases(plan: TransposePlan) -> list[tuple[AxisPhase, AxisPhase]]:
    """Phases with outputs no tap reaches (merged: a lane without taps sums 0, no such phase)."""
    return [(a, b) for a in plan.rows for b in plan.cols
            if a.count and b.count and not (a.taps and (b.taps or plan.merged))]


def emit_phases(w: CWriter, g: ConvGeom, plan: TransposePlan, x: str, wps: dict,
                spec: PhaseArith, params: Params,
                empty_store: Callable[[int, int], None] | None = None) -> None:
    """Every image's row groups: the line buffer, the phases no tap reaches
    (``empty_store(rw, count)``), then the column tiles of every live phase, a segment at a
    time (module docstring)."""
    fma = kernels(params.store.isa).fma_tile if spec.sums is FLOAT32 else None
    lf = plan.line_floats
    w.open(f"for (int n = 0; n < {g.n}; ++n) for (int qh = 0; qh < {plan.rows[0].count}; ++qh)")
    if lf:
        w(f"{spec.ctype} line[{g.c * lf}];")
    for rh, rw in empty_phases(plan):
        assert empty_store is not None, "the caller refuses phases without taps"
        _guard(w, rh.count, plan.rows[0].count)
        w(f"const int oh = qh*{g.s[0]} + {rh.r};")
        empty_store(rw.r, rw.count)
        w.close()
    if plan.full:
        w.open(f"for (int c0 = 0; c0 < {plan.full * plan.segment}; c0 += {plan.segment})")
        _segment(w, g, plan, x, wps, spec, params, fma,
                 [plan.segment if p.taps and p.count else 0 for p in plan.cols])
        w.close()
    if any(plan.tail):
        w.open("")
        w(f"const int c0 = {plan.full * plan.segment};")
        _segment(w, g, plan, x, wps, spec, params, fma, list(plan.tail))
        w.close()
    w.close()


def _guard(w: CWriter, count: int, rows: int) -> None:
    w.open(f"if (qh < {count})" if count < rows else "")


def _out(ys: tuple[int, ...], rw: int | str, q: str) -> str:
    """Output column ``q*sw + rw`` of row ``oh``, channel ``c``, image ``n``."""
    return f"n*{ys[0]} + c*{ys[1]} + oh*{ys[2]} + {rw} + ({q})*{ys[4]}"


def _groups(phases: list[AxisPhase], counts: list[int]) -> list[tuple[int, tuple[int, ...],
                                                                     list[tuple[int, int]]]]:
    """Phases of one count whose taps' offsets are the same up to a shift, written once and
    looped over: (count, offsets less the least, [(phase, its least offset)])."""
    found: dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]] = {}
    for p in phases:
        if counts[p.r]:
            lo = min(e for _, e in p.taps)
            found.setdefault((counts[p.r], tuple(e - lo for _, e in p.taps)), []).append((p.r, lo))
    return [(c, rel, members) for (c, rel), members in found.items()]


def _table(w: CWriter, name: str, values: list[int]) -> None:
    w(f"static const int {name}[] = {{{', '.join(map(str, values))}}};")


def _pointers(w: CWriter, name: str, ctype: str, values: list) -> None:  # noqa: ANN001
    w(f"const {ctype} *const {name}[] = {{{', '.join(v or '0' for v in values)}}};")


def _segment(w: CWriter, g: ConvGeom, plan: TransposePlan, x: str, wps: dict, spec: PhaseArith,
             params: Params, fma, stored: list[int]) -> None:  # noqa: ANN001
    """Columns ``c0 ..`` of every live phase of row group ``qh``: ``stored[rw]`` columns of
    column phase ``rw`` (computed: ``plan.computed`` of them), its line buffer filled first.
    Phases whose taps differ by a shift only (``_groups``: every phase where ``s`` divides ``k``)
    share one tile, looped over with each phase's row, column, weights and bias."""
    widest = max(plan.computed(s) for s in stored)
    lw = plan.line_width(widest)
    per_ci = plan.line_rows * lw
    if plan.in_place:
        row, pitch, lo_h, lo_w = f"{x} + (n*{g.c} + ci)*{g.ih * g.iw} + qh*{g.iw} + c0", g.iw, 0, 0
    else:
        row, pitch, lo_h, lo_w = f"line + ci*{per_ci}", lw, plan.row_lo, plan.col_lo
        _fill(w, g, plan, x, lw, per_ci, spec)
    ar = spec.sums
    one_bias = len(set(spec.biases.values())) == 1  # float: one bias for every phase
    for count, rel_h, rm in _groups(live(plan.rows), [p.count for p in plan.rows]):
        _guard(w, count, plan.rows[0].count)
        w.open(f"for (int a = 0; a < {len(rm)}; ++a)")
        _table(w, "rh_of", [r for r, _ in rm])
        _table(w, "rb_of", [(lo - lo_h) * pitch for _, lo in rm])
        w(f"const int oh = qh*{g.s[0]} + rh_of[a];")
        if plan.merged:
            _pointers(w, "wt_of", ar.w_type, [wps[r, 0] for r, _ in rm])
            w(f"const {ar.w_type} *wph = wt_of[a];")
            taps = tuple(e * pitch + u - lo_w for e in rel_h for u in _union(plan))
            tile = ColumnTile(taps=taps, row=f"{row} + rb_of[a]", wp="wph",
                              bp=next(iter(spec.biases.values())), group=g.group, icg=g.icg,
                              ocg=g.s[1], lanes=g.s[1], columns=plan.computed(max(stored)),
                              width=plan.width, overlap=params.restrict != "" and len(taps) > 1)
            column_tiles(w, tile, lambda width, tile=tile: spec.merged(tile, width), fma)
        for cc, rel_w, cm in ([] if plan.merged else _groups(live(plan.cols), stored)):
            w.open(f"for (int b = 0; b < {len(cm)}; ++b)")
            _table(w, "rw_of", [r for r, _ in cm])
            _table(w, "cb_of", [lo - lo_w for _, lo in cm])
            _pointers(w, "wt_of", ar.w_type, [wps[a, b] for a, _ in rm for b, _ in cm])
            w(f"const int rw = rw_of[b]; const {ar.w_type} *wph = wt_of[a*{len(cm)} + b];")
            bp = next(iter(spec.biases.values()))
            if not one_bias:
                _pointers(w, "bt_of", ar.acc_type, [spec.biases[a, b] for a, _ in rm for b, _ in cm])
                w(f"const {ar.acc_type} *bph = bt_of[a*{len(cm)} + b];")
                bp = "bph"
            taps = tuple(eh * pitch + ew for eh in rel_h for ew in rel_w)
            tile = ColumnTile(taps=taps, row=f"{row} + rb_of[a] + cb_of[b]", wp="wph", bp=bp,
                              group=g.group, icg=g.icg, ocg=g.ocg, lanes=plan.lanes,
                              columns=plan.computed(cc), width=plan.width, arith=ar,
                              overlap=params.restrict != "" and len(taps) > 1)
            column_tiles(w, tile, lambda width, tile=tile, cc=cc: spec.store(tile, width, cc), fma)
            w.close()
        w.close()
        w.close()


def _fill(w: CWriter, g: ConvGeom, plan: TransposePlan, x: str, lw: int, per_ci: int,
          spec: PhaseArith) -> None:
    """The line buffer of row group ``qh`` from column ``c0``: input rows ``qh + row_lo ..``,
    columns ``c0 + col_lo ..``, ``spec.pad`` outside the input."""
    plane, ct, pad = g.ih * g.iw, spec.ctype, spec.pad
    for j in range(plan.line_rows):
        w(f"const int iy{j} = qh + {plan.row_lo + j}, in{j} = iy{j} >= 0 && iy{j} < {g.ih};")
    w.open(f"for (int ci = 0; ci < {g.c}; ++ci)")
    for j in range(plan.line_rows):
        w.open(f"if (in{j})")
        w(f"const {ct} *xr = {x} + (n*{g.c} + ci)*{plane} + iy{j}*{g.iw};")
        if plan.full:  # segments: the columns' bounds are known at run time only
            w(f"{ct} *p = line + ci*{per_ci} + {j * lw};")
            w(f"for (int j = 0; j < {lw}; ++j) {{ const int ix = c0 + {plan.col_lo} + j; "
              f"p[j] = ix >= 0 && ix < {g.iw} ? xr[ix] : {pad}; }}")
        else:  # one segment (c0 is 0): linebuffer's copy, its bounds in the C text
            phase_copy(w, f"(line + ci*{per_ci} + {j * lw})", "xr", 1, lw, -plan.col_lo, g.iw,
                       ctype=ct, pad=pad)
        w.close()
        w(f"else for (int j = 0; j < {lw}; ++j) line[ci*{per_ci} + {j * lw} + j] = {pad};")
    w.close()
