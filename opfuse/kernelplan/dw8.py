"""The plan of an int8 depthwise conv in x86/depthwise_vbmi.py (AVX-512 VBMI: vectors of 16
output pixels of one channel, every lane's reads decided at generation time), and the cost model's
work of it (opfuse/cost/cwork.py, ``x86_depthwise_work``): whether the plane is one run of
pixels (flat) or vectors per output row, and for each vector and tap row the ``Window`` of input
bytes its quad of taps reads (None: every byte is padding), with the ``vpermt2b`` tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opfuse.kernelplan.conv8 import ConvGeom

FLAT_MAX = 48  # vectors of a flat plane, at most (unrolled in the channel loop; the tables of
# equal windows are one)
PAD = 64  # a table's index of the pad byte (vpermt2b's second source)


@dataclass(frozen=True)
class Window:
    base: int  # first byte read: from the plane (flat) or from the tap row (rows)
    count: int  # bytes read (<= 64)
    table: int  # its table's index


@dataclass(frozen=True)
class DwPlan:
    flat: bool
    vectors: int  # of the plane (flat) or of a row
    windows: dict  # (vector, kh, j) (flat; None: every byte is pad) or (vector, j) (rows)
    tables: np.ndarray  # [count][64] uint8


def _window(offs: list[int | None], limit: int, tables: list[list[int]]) -> Window | None:
    """The window of 64 byte indices ``offs`` (None: pad), or None if all are pad; raises
    ValueError when they span more than 64 bytes."""
    valid = [o for o in offs if o is not None]
    if not valid:
        return None
    base = min(valid)
    if max(valid) - base >= 64:
        raise ValueError("span")
    table = [PAD if o is None else o - base for o in offs]
    if table not in tables:
        tables.append(table)
    return Window(base, min(64, limit - base), tables.index(table))


def _lane_cols(g: ConvGeom, ow: int | None, j: int) -> list[int | None]:
    """The 4 input columns of output column ``ow``'s quad ``j`` (None: outside or no tap)."""
    out: list[int | None] = []
    for k in range(4):
        kw = 4 * j + k
        iw = None if ow is None else ow * g.s[1] + kw * g.d[1] - g.p[1]
        out.append(iw if kw < g.k[1] and iw is not None and 0 <= iw < g.iw else None)
    return out


def plan_dw(g: ConvGeom, kq: int) -> DwPlan | None:
    plane = g.oh * g.ow
    tables: list[list[int]] = []
    nv = -(-plane // 16)
    row_fill = g.ow / (16 * -(-g.ow // 16))
    if plane / (16 * nv) > row_fill and nv <= FLAT_MAX:
        try:
            windows = {}
            for v in range(nv):
                for kh in range(g.k[0]):
                    for j in range(kq):
                        offs: list[int | None] = []
                        for lane in range(16):
                            p = 16 * v + lane
                            ih = p // g.ow * g.s[0] + kh * g.d[0] - g.p[0] if p < plane else -1
                            cols = _lane_cols(g, p % g.ow if 0 <= ih < g.ih else None, j)
                            offs += [None if c is None else ih * g.iw + c for c in cols]
                        windows[v, kh, j] = _window(offs, g.ih * g.iw, tables)
            return DwPlan(True, nv, windows, np.array(tables, np.uint8))
        except ValueError:
            tables = []
    nv = -(-g.ow // 16)
    try:
        windows = {}
        for v in range(nv):
            for j in range(kq):
                offs = []
                for lane in range(16):
                    ow = 16 * v + lane
                    offs += _lane_cols(g, ow if ow < g.ow else None, j)
                windows[v, j] = _window(offs, g.iw, tables)
    except ValueError:
        return None
    if not tables:
        return None
    return DwPlan(False, nv, windows, np.array(tables, np.uint8))


DW_ISAS = ("x86",)  # the ISA modules that write these vectors (isa/x86/depthwise*.py)


def has_dw8(isa_name: str) -> bool:
    """The ISA module ``isa_name`` writes int8 depthwise convs (multiplier 1) as vectors of 16
    output pixels of a channel (x86/depthwise.py, under TFLite's rounding); the cost model
    (opfuse/cost/cwork.py) then counts them its way."""
    return isa_name in DW_ISAS


def uses_dw_vectors(g: ConvGeom) -> bool:
    """The depthwise vectors apply (x86/depthwise.applies): undilated columns, column stride 1
    or 2 (the rounding and the quantization are the caller's to check)."""
    return g.d[1] == 1 and g.s[1] in (1, 2)


def is_flat(g: ConvGeom) -> bool:
    """x86/depthwise.py's flat layout (no VBMI plan): stride 1 and as wide as the input, the
    output plane one run of pixels."""
    return g.s == (1, 1) and g.ow == g.iw


def rows_inside(g: ConvGeom) -> list[int]:
    """The tap rows ``kh`` inside the input for at least one output row (stride 1: the flat
    layout, which skips the others)."""
    return [kh for kh in range(g.k[0])
            if max(0, g.p[0] - kh * g.d[0]) < min(g.oh, g.ih + g.p[0] - kh * g.d[0])]


@dataclass(frozen=True)
class DwCount:
    """One channel's instructions in the vectors of x86/depthwise*.py: ``dots`` (``vpdpbusd``
    of a quad of taps, 16 pixels) and ``vectors`` (each requantized and stored once)."""

    dots: int
    vectors: int


def dw_count(g: ConvGeom) -> DwCount:
    """What one channel of ``g`` runs: VBMI's plan (``plan_dw``: every window decided, an
    all-pad tap row skipped) where it exists, else x86/depthwise.py's (flat for stride 1 as wide
    as the input, else per output row; a tap row outside skipped)."""
    kq = -(-g.k[1] // 4)
    plan = plan_dw(g, kq)
    inside = [sum(1 for oh in range(g.oh) if 0 <= oh * g.s[0] + kh * g.d[0] - g.p[0] < g.ih)
              for kh in range(g.k[0])]  # output rows whose tap row kh is inside
    if plan is not None and plan.flat:
        dots = sum(kq for v in range(plan.vectors) for kh in range(g.k[0])
                   if any(plan.windows[v, kh, j] is not None for j in range(kq)))
        return DwCount(dots, plan.vectors)
    if plan is not None:
        live = sum(1 for v in range(plan.vectors)
                   if any(plan.windows[v, j] is not None for j in range(kq)))
        return DwCount(live * kq * sum(inside), plan.vectors * g.oh)
    if is_flat(g):
        nv = -(-g.oh * g.ow // 16)
        return DwCount(nv * kq * len(rows_inside(g)), nv)
    nv = -(-g.ow // 16)
    return DwCount(nv * kq * sum(inside), nv * g.oh)
