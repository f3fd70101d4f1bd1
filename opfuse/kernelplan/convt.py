"""The plan of a float ConvTranspose in the generated C (backends/c/convt.py) and its price
(cost/fwork.py): a stride-``s`` transposed conv as ``s_h x s_w`` sub-pixel *phases*, each an
ordinary stride-1 correlation that pointwise.py's column tiles compute.

Along one axis output ``o`` receives input ``i`` through tap ``k`` where ``o = i*s + k*d - p``
(``p`` the begin pad). Output phase ``r`` holds the outputs ``o = q*s + r``, ``q < count``; tap
``k`` reaches it where ``(r + p - k*d) % s == 0``, from input ``i = q + e`` with
``e = (r + p - k*d) // s``. So phase ``r`` is a correlation of the input with the taps ``k`` of
that residue, each at its own offset ``e`` (with dilation the residues ``k*d`` cover only the
multiples of ``gcd(d, s)``: a phase may have no tap, its outputs the bias; ``s`` need not divide
``k``, the phases then have unequal taps). Pads larger than the stride, ``output_padding`` and
``output_shape`` only move the offsets and the counts.

A row of a phase reads the input rows ``q + e`` of its row taps; one line buffer per output row
group ``q`` holds every row any row phase reads (``e`` from ``row_lo`` to ``row_hi``), each channel's
row zero-padded (columns ``col_lo`` .. past the input), so every phase's taps sit at constant
offsets. Where no phase reads outside the input (a 2x2 stride-2 upsampling) the tiles read the
input rows in place. A row longer than ``LINE_FLOATS`` allows runs in segments of ``segment``
columns, the line buffer refilled for each.
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.kernelplan.convf import (
    LINE_FLOATS,
    SPATIAL_LANES,
    SPATIAL_WIDTH,
    FloatConvPlan,
    plan_rows,
)

VEC = 8  # a phase row narrower than this computes VEC columns and stores its own (convrows.VEC)


@dataclass(frozen=True)
class AxisPhase:
    """Outputs ``q*s + r`` for ``q < count``; ``taps``: (kernel index, input offset ``e``)."""

    r: int
    count: int
    taps: tuple[tuple[int, int], ...]


def axis_phases(out: int, k: int, s: int, d: int, p: int) -> list[AxisPhase]:
    """The ``s`` phases of one axis (module docstring); a phase past the output has count 0."""
    return [AxisPhase(r, max(0, -(-(out - r) // s)),
                      tuple((j, (r + p - j * d) // s) for j in range(k)
                            if (r + p - j * d) % s == 0))
            for r in range(s)]


def transpose_pads(ins: list[int], outs: list[int], ks: list[int], ss: list[int],
                   ds: list[int], pads: list[int] | None, shape_given: bool,
                   out_pad: list[int] | None, auto_pad: str) -> list[int]:
    """The begin pad per spatial axis: ``pads`` as given, else (``output_shape`` given, or
    ``auto_pad``) ONNX's split of the total padding the output size implies."""
    n = len(ins)
    if pads is not None and not shape_given:
        return list(pads[:n])
    out_pad = out_pad or [0] * n
    begin = []
    for i in range(n):
        total = max(ss[i] * (ins[i] - 1) + out_pad[i] + (ks[i] - 1) * ds[i] + 1 - outs[i], 0)
        begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
    return begin


def transpose_geom(xs: list[int], ys: list[int], ks: list[int], ss: list[int], ds: list[int],
                   pads: list[int] | None, shape_given: bool, out_pad: list[int] | None,
                   auto_pad: str, group: int) -> ConvGeom:
    """A 1-D or 2-D ConvTranspose's geometry from its input and output dims and attributes
    (``transpose_pads``'s), 1-D as a height of 1 (``c``: input channels, ``oc``: output
    channels): what convt.py emits and cost/fwork.py prices."""
    nsp = len(xs) - 2
    pb = transpose_pads(list(xs[2:]), list(ys[2:]), ks, ss, ds, pads, shape_given, out_pad,
                        auto_pad)
    if nsp == 1:
        xs, ys = [xs[0], xs[1], 1, xs[2]], [ys[0], ys[1], 1, ys[2]]
        ks, ss, ds, pb = [1, *ks], [1, *ss], [1, *ds], [0, *pb]
    return ConvGeom(xs[0], xs[1], xs[2], xs[3], ys[1], ys[2], ys[3], group, (ks[0], ks[1]),
                    (ss[0], ss[1]), (ds[0], ds[1]), (pb[0], pb[1]))


@dataclass(frozen=True)
class TransposePlan:
    """``rows``/``cols``: the phases of each axis; ``lanes`` x ``width``: the column tile;
    ``row_lo .. row_hi``: the input row offsets the line buffer holds, ``col_lo`` its first
    column's offset, ``line``: its floats a channel (0: the rows read in place); ``computed``:
    the columns each column phase computes in a segment of ``segment`` (its last, ``tail``:
    what is left, per phase)."""

    rows: tuple[AxisPhase, ...]
    cols: tuple[AxisPhase, ...]
    lanes: int
    width: int
    row_lo: int
    row_hi: int
    col_lo: int
    col_hi: int
    in_place: bool
    segment: int
    full: int  # segments of ``segment`` columns every live column phase fills
    tail: tuple[int, ...]  # per column phase: the columns of its last, partial segment
    merged: bool = False  # the column phases are the tile's lanes (one output channel a group)

    @property
    def line_rows(self) -> int:
        return self.row_hi - self.row_lo + 1

    def line_width(self, columns: int) -> int:
        """One line-buffer row of a segment of ``columns`` computed columns."""
        return columns + self.col_hi - self.col_lo

    def computed(self, columns: int) -> int:
        """The columns a phase with ``columns`` to store computes (VEC at least, not in place)."""
        return columns if self.in_place or columns >= VEC or columns == 0 else VEC

    @property
    def line_floats(self) -> int:
        """Floats of one channel's line buffer (0 when the rows are read in place)."""
        if self.in_place:
            return 0
        widest = max([self.segment if self.full else 0]
                     + [self.computed(t) for t in self.tail])
        return self.line_rows * self.line_width(widest)


def live(phases: tuple[AxisPhase, ...] | list[AxisPhase]) -> list[AxisPhase]:
    return [p for p in phases if p.taps and p.count]


def plan_convt(g: ConvGeom, bias_packed: bool, weights_packed: bool = True,
               merge: bool = True) -> TransposePlan:
    """The plan of ``g`` (a ConvTranspose's geometry: ``c`` input channels, ``icg``/``ocg`` its
    channels a group); ``bias_packed``: the bias is constant or absent (a runtime one makes the
    tile's lanes divide the group's channels); ``weights_packed``: the weights are constant;
    ``merge`` False: no merged lanes (int8's tiles store per phase).
    One output channel a group (FCN's grouped upsampling) with constant weights and bias and a
    stride across: the ``sw`` column phases are the tile's lanes (``merged``), each phase's
    weights zero at the offsets of the other phases' taps, so a tile sums ``sw`` x its columns
    rather than one channel's (fcn_up8_grouped, benchmarks/convt_models.py: one channel a tile
    ran 3.4x the old gather's time)."""
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = g.k, g.s, g.d, g.p
    rows = tuple(axis_phases(g.oh, kh, sh, dh, ph))
    cols = tuple(axis_phases(g.ow, kw, sw, dw, pw))
    tile = plan_rows(g, bias_packed)
    er = [e for p in live(rows) for _, e in p.taps] or [0]
    ec = [e for p in live(cols) for _, e in p.taps] or [0]
    row_lo, row_hi, col_lo, col_hi = min(er), max(er), min(ec), max(ec)
    merged = merge and g.ocg == 1 and g.s[1] > 1 and bias_packed and weights_packed
    if merged:
        tile = FloatConvPlan("columns", g.s[1], columns=max(SPATIAL_LANES * SPATIAL_WIDTH
                                                            // g.s[1], 1))
    in_place = (all(min(e for _, e in p.taps) >= 0 and p.count - 1 + max(e for _, e in p.taps)
                    < g.ih for p in live(rows))
                and all(min(e for _, e in p.taps) >= 0 and p.count >= VEC
                        and p.count - 1 + max(e for _, e in p.taps) < g.iw for p in live(cols)))
    counts = [p.count if p.taps else 0 for p in cols]
    if merged:  # every lane computes the widest phase's columns over the taps of all
        in_place = in_place and (col_lo >= 0 and cols[0].count >= VEC
                                 and cols[0].count - 1 + col_hi < g.iw)
        counts = [cols[0].count] * len(cols)
    widest = max(max(counts), 1)
    reach = col_hi - col_lo
    per_column = g.c * (row_hi - row_lo + 1)
    segment = widest
    if not in_place and per_column * (max(widest, VEC) + reach) > LINE_FLOATS:
        segment = max(tile.columns, (LINE_FLOATS // per_column - reach) // tile.columns
                      * tile.columns)
    least = min((c for c in counts if c), default=0)
    full = least // segment if segment < widest else 0
    tail = tuple(max(c - full * segment, 0) for c in counts)
    return TransposePlan(rows, cols, tile.lanes, tile.columns, row_lo, row_hi, col_lo, col_hi,
                         in_place, segment, full, tail, merged)


@dataclass(frozen=True)
class TransposeWork:
    """What the C of a plan does (cost/fwork.py prices it on the ``columns`` and ``line``
    paths): the tiles' multiply-adds (zero-padded lanes, the computed columns past a short row
    and a merged tile's zero taps included), outputs, tile loops (a row of a phase, a block of
    lanes, an input channel) and floats copied into the line buffer."""

    macs: int
    outputs: int
    loops: int
    line: int


def transpose_work(g: ConvGeom, plan: TransposePlan) -> TransposeWork:
    segments = [plan.segment] * plan.full
    computed = [sum(segments) + plan.computed(t) for t in plan.tail]
    macs = loops = 0
    for a in live(plan.rows):
        if plan.merged:
            union = len({e for b in live(plan.cols) for _, e in b.taps})
            macs += a.count * g.group * plan.lanes * max(computed) * g.icg * len(a.taps) * union
            loops += a.count * g.group * g.icg
            continue
        blocks = -(-g.ocg // plan.lanes)
        for b in live(plan.cols):
            macs += (a.count * g.group * blocks * plan.lanes * computed[b.r] * g.icg
                     * len(a.taps) * len(b.taps))
            loops += a.count * g.group * blocks * g.icg
    widths = [plan.line_width(s) for s in segments]
    if any(plan.tail):
        widths.append(plan.line_width(max(plan.computed(t) for t in plan.tail)))
    line = 0 if plan.in_place else plan.rows[0].count * g.c * plan.line_rows * sum(widths)
    return TransposeWork(g.n * macs, g.n * g.oc * g.oh * g.ow, g.n * loops, g.n * line)
