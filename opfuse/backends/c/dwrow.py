"""The depthwise row read in place, written once over the arithmetic (arith.py): output row ``oh``
of channel ``c`` straight from the KH input rows it reads, for float32 and int8, layer by layer
and as a cascade member (the rows where a ``RowSource`` or a ring holds them; docs/architecture.md,
"One depthwise row for both dtypes"). Its users: the int8 depthwise family (int8/depthwise_dsp.py)
on every ISA, and the float depthwise conv on a scalar FPU (dwconv.py, ``in_place``).

* ``r<kh>``, one pointer per tap row (``row_pointers``): the source row, or for a row above or
  below the input the family's ``zero`` row (float: zeros; int8: z_x bytes, whose products the
  bias's fold of the zero point cancels), so no tap row is tested in the sums;
* the columns whose window leaves the row (``RowColumns.singles``, a few per row) are written
  out, each with the taps inside the row (``Arith.pad`` for the others), or for a large window
  run in one loop (``Arith.loop_borders_above``), the input ``Arith.centered``;
* the interior columns, whose taps all lie inside the row: one loop, each column its sum and its
  store (``Arith.pair`` 1), or groups of ``Arith.pair`` columns (int8) summed by the ISA's
  micro-kernel (``IsaKernels.depthwise_pairs``: SMLAD pairs on Armv7E-M) with the portable sums
  in its ``#else``: one loop over the row into ``ar`` that a host compiler vectorizes;
* an ISA's own whole row (``IsaKernels.depthwise_row``: isa/mve) in front of all that, under
  its guard.

Every sum is ``Arith.init`` then the taps in (kh, kw) order; it is finished (``Arith.finish``)
and stored by the caller's ``out(col)``, which sees ``v``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opfuse.backends.c.arith import Arith
from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.base import DepthwisePairs
from opfuse.kernelplan.conv8 import interior

Out = Callable[[str], None]  # out(col): the epilogue of ``v`` and its store at column ``col``


@dataclass(frozen=True)
class RowColumns:
    """An output row's columns: ``singles``, those whose window leaves the row, as (column, first
    tap, end tap) with the taps inside it; the interior from ``first``, ``groups`` of ``pair``."""

    singles: tuple[tuple[int, int, int], ...]
    first: int
    groups: int
    pair: int

    @property
    def end(self) -> int:
        return self.first + self.groups * self.pair


def row_columns(g, pair: int) -> RowColumns:  # noqa: ANN001 - a ConvGeom
    """The columns of an output row for interior groups of ``pair`` (> 1: the int8 groups, whose
    words of four bytes must stay in the row, ``kernelplan.conv8.interior``)."""
    (_, kw_), (_, sw), (_, dw), (_, pw) = g.k, g.s, g.d, g.p
    if pair > 1:
        first, groups = interior(g.iw, kw_, sw, pw, pair)
    else:
        first = min(-(-pw // sw), g.ow)
        last = min(g.ow - 1, (g.iw - 1 - (kw_ - 1) * dw + pw) // sw)  # its last tap inside
        groups = max(0, last - first + 1)
    end = first + groups * pair
    singles = []
    for ow in (*range(0, first), *range(end, g.ow)):
        x0 = ow * sw - pw
        singles.append((ow, max(0, -(x0 // dw)), min(kw_, -(-(g.iw - x0) // dw))))
    return RowColumns(tuple(singles), first, groups, pair)


def unrolled(arith: Arith, g) -> bool:  # noqa: ANN001
    """Whether the border columns get code of their own per column (fast, but flash per column):
    float always (its sums keep the band's order); int8 for 3x3 or smaller windows, as a 5x5 or
    7x7 one has up to 6 such columns of 25-49 taps each (10 KB of code on mcunet_vww)."""
    return arith.loop_borders_above is None or g.k[0] * g.k[1] <= arith.loop_borders_above


def row_pointers(w: CWriter, g, oh: str, row: Callable[[str], str], zero: str,  # noqa: ANN001
                 in_type: str, step: str | None = None) -> None:
    """``r<kh>``, the pointers of the tap rows of output row ``oh`` (``zero`` above or below the
    input); ``step``: also ``st<kh>``, what each pointer advances by from one channel to the next
    (``step`` for a row inside the input, 0 for ``zero``)."""
    (kh_, _), (sh, _), (dh, _), (ph, _) = g.k, g.s, g.d, g.p
    w(f"const int ih0 = {oh}*{sh} - {ph};")
    for kh in range(kh_):
        inside = f"(unsigned)(ih0 + {kh * dh}) < {g.ih}u"
        w(f"const {in_type} *r{kh} = {inside} ? {row(f'(ih0 + {kh * dh})')} : {zero};")
        if step:
            w(f"const int st{kh} = {inside} ? {step} : 0;")


def emit_row(w: CWriter, arith: Arith, g, oh: str, row: Callable[[str], str] | None,  # noqa: ANN001
             zero: str, out: Out, pairs: DepthwisePairs | None = None,
             isa_row: tuple[str, Callable[..., None]] | None = None) -> None:
    """Output row ``oh`` of channel ``c`` (after the family's channel setup): ``row(ih)`` is the C
    pointer of the channel's input row ``ih`` (None: the caller declared ``r<kh>``,
    ``row_pointers``), ``zero`` the row read for a tap row outside the input; ``pairs``: the
    ISA's interior groups; ``isa_row``: (guard, writer(w, store)) of the ISA's whole row, which
    stores through ``store(acc, col, doubled)``."""
    if row is not None:
        row_pointers(w, g, oh, row, zero, arith.in_type)
    cols = row_columns(g, arith.pair)
    each = unrolled(arith, g)

    def store(acc: str, col: str, doubled: bool | None = None) -> None:
        w.open("")
        arith.finish(w, acc, doubled)
        out(col)
        w.close()

    if isa_row is not None:  # the ISA's whole row, this one in its #else
        w(isa_row[0])
        isa_row[1](w, store)
        w("#else")
    for ow, k0, k1 in cols.singles if each else ():
        if ow < cols.first:
            _single(w, arith, g, ow, (k0, k1), store)
    if cols.groups:
        if cols.pair == 1:
            _interior_loop(w, arith, g, cols, store)
        else:
            _groups(w, arith, pairs, g, cols, store)
    for ow, k0, k1 in cols.singles if each else ():
        if ow >= cols.first:
            _single(w, arith, g, ow, (k0, k1), store)
    if cols.singles and not each:
        _singles_loop(w, arith, g, cols, store)
    if isa_row is not None:
        w("#endif")


def _single(w: CWriter, arith: Arith, g, ow: int, taps: tuple[int, int],  # noqa: ANN001
            store: Callable[..., None]) -> None:
    """Column ``ow`` alone: its taps ``k0 .. k1`` of each row inside the row, the others
    ``Arith.pad`` (float: a product by 0.0f; int8: nothing, ``bk<k0>_<k1>`` holds their share)."""
    (kh_, kw_), (_, sw), (_, dw), (_, pw) = g.k, g.s, g.d, g.p
    x0 = ow * sw - pw
    terms = [arith.init(*taps)]
    for kh in range(kh_):
        for k in range(kw_):
            t = kh * kw_ + k
            term = (arith.product(f"r{kh}[{x0 + k * dw}]", t) if taps[0] <= k < taps[1]
                    else arith.pad(t))
            if term is not None:
                terms.append(term)
    w.open("")
    w(f"{arith.declare} = {' + '.join(terms)};")
    store(arith.acc, str(ow))
    w.close()


def _interior_loop(w: CWriter, arith: Arith, g, cols: RowColumns,  # noqa: ANN001
                   store: Callable[..., None]) -> None:
    """The interior columns one at a time: each its sum, then its store."""
    (kh_, kw_), (_, sw), (_, dw), (_, pw) = g.k, g.s, g.d, g.p
    at = "i" if sw == 1 else f"i*{sw}"
    terms = [arith.init(0, kw_)]
    for kh in range(kh_):
        for k in range(kw_):
            off = k * dw - pw
            x = f"{at} {'-' if off < 0 else '+'} {abs(off)}" if off else at
            terms.append(arith.product(f"r{kh}[{x}]", kh * kw_ + k))
    w.open(f"for (int i = {cols.first}; i < {cols.end}; ++i)")
    w(f"{arith.declare} = {' + '.join(terms)};")
    store(arith.acc, "i")
    w.close()


def _groups(w: CWriter, arith: Arith, pairs: DepthwisePairs | None, g,  # noqa: ANN001
            cols: RowColumns, store: Callable[..., None]) -> None:
    """The interior columns ``first .. end``, ``pair`` a group: the ISA's pairs where it has them,
    the portable sums (``ar``) in their #else."""
    first, end, pair = cols.first, cols.end, cols.pair
    if pairs is not None:
        w(pairs.off)
    _portable_sums(w, arith, g, first, end)
    if pairs is not None:
        w("#endif")
        pairs.pointers(w, g, first)
    if cols.groups == 1:  # a narrow row (kws's 5 columns): one group, no loop to step
        w.open("")
        w(f"const int ow = {first};")
    else:
        w.open(f"for (int ow = {first}; ow < {end}; ow += {pair})")
    if pairs is not None:
        w(pairs.on)
        pairs.group(w, g, cols.groups > 1)
        w("#else")
    w(f"const {arith.acc_type} "
      + ", ".join(f"a{d} = ar[ow - {first} + {d}]" for d in range(pair)) + ";")
    if pairs is not None:
        w("#endif")
    for d in range(pair):
        store(f"a{d}", f"ow + {d}" if d else "ow")
    w.close()


def _portable_sums(w: CWriter, arith: Arith, g, first: int, end: int) -> None:  # noqa: ANN001
    """The portable C: the sums of the grouped columns first, one loop over the row that the
    host's compiler vectorizes, then the stores."""
    (kh_, kw_), (_, sw), (_, dw), (_, pw) = g.k, g.s, g.d, g.p
    w(f"{arith.acc_type} ar[{end - first}];")
    w.open(f"for (int i = 0; i < {end - first}; ++i)")
    w(f"const int x0 = (i + {first})*{sw} - {pw};")
    terms = [arith.product(f"r{kh}[x0 + {k * dw}]", kh * kw_ + k)
             for kh in range(kh_) for k in range(kw_)]
    w(f"ar[i] = {' + '.join([arith.init(0, kw_), *terms])};")
    w.close()


def _singles_loop(w: CWriter, arith: Arith, g, cols: RowColumns,  # noqa: ANN001
                  store: Callable[..., None]) -> None:
    """The border columns (``0 .. first``, ``end .. ow``) in one loop with one store site: each
    sums ``bias + centered(x) * w`` over its taps inside the row (undilated)."""
    (kh_, kw_), (_, sw), (_, dw), (_, pw) = g.k, g.s, g.d, g.p
    assert dw == 1, "the border loop reads undilated windows"
    first, end = cols.first, cols.end
    w.open(f"for (int j = 0; j < {len(cols.singles)}; ++j)")
    w(f"const int ow = j < {first} ? j : j - {first} + {end};")
    w(f"const int x0 = ow*{sw} - {pw};")
    w("const int k0 = x0 < 0 ? -x0 : 0;")
    w(f"const int k1 = {g.iw} - x0 < {kw_} ? {g.iw} - x0 : {kw_};")
    w(f"{arith.acc_type} {arith.acc} = {arith.bias};")
    w.open("for (int k = k0; k < k1; ++k)")
    for kh in range(kh_):
        w(f"{arith.acc} += {arith.centered(f'r{kh}[x0 + k]')}*wc[{kh * kw_} + k];")
    w.close()
    store(arith.acc, "ow")
    w.close()
