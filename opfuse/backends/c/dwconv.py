"""Depthwise convolution (one input and one output channel per group), epilogue fused: the one
float depthwise core, of the layer-by-layer kernel and of a cascade member alike.

Per channel, the KH*KW weights and the bias are loaded into scalars once. The output rows are
processed in bands: the input rows a band reads are copied into a small zero-bordered buffer on
the stack, so every tap reads inside it and the arithmetic has no tests. At stride 1 the band is
computed as one flat loop over the padded width (columns past the output width are computed and
dropped), otherwise row by row, with the band's rows split into their column phases at a
horizontal stride > 1 (so a stride-2 tap is a contiguous load, not a strided gather); both are sums
of KH*KW products at compile-time offsets that gcc vectorizes. The band's values (+ bias) then go
through the epilogue and are stored once.

The input rows come from a ``RowSource`` (opfuse/backends/c/rowsource.py): the whole tensor, or a
cascade's ring, whose ``% R`` is formed once per copied row. The layer-by-layer kernel
(``emit_depthwise``) cuts the output into bands of a compile-time height and applies the fused
``Chain``; a cascade member (``emit_depthwise_rows``) computes its step's rows ``a .. b`` and
stores through a ``RowSink`` (the member's epilogue) in bands of at most the step's height.

On a scalar FPU (``in_place``: the MCU boards), and on a vector unit onto narrow rows, both
instead compute row by row from the KH source rows where they are, at any stride: the depthwise row nest the int8 kernel shares
(dwrow.py, over ``arith.FLOAT32``; a row outside the input is a zero row of the weights, only the
few border columns, written out, have taps outside the row), each value through the chain (the
layer-by-layer kernel: ``epilogue.emit_steps``) or the member's epilogue as it is summed: the
band's sums term for term, bit-identical, no copy and no band on the stack.

An ISA with the rows in vectors (``IsaKernels.depthwise_float``, isa/x86/floatdw.py; its
``[isa]`` record's ``depthwise_rows``) takes both where the float plan says so
(``kernelplan.convf.depthwise_vectors``: a Relu / Clip epilogue, stride 1 or 2, at most 7x7; the
cost model reads the same function and prices no band copy there), reading the rows in place
through the same tap-row pointers (``dwrow.row_pointers``, the zero row outside the input), all
of the above in its ``#else``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from opfuse.backends.c.arith import FLOAT32
from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.dwrow import emit_row, row_pointers
from opfuse.backends.c.epilogue import Chain, clamps, emit_apply, emit_steps, operand_loads
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.rowsource import RowSink, RowSource
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.kernelplan import convf
from opfuse.targets.isa import Isa

BAND_FLOATS = 4096  # stack budget of the padded input band (floats)


def _padded_width(g) -> int:  # noqa: ANN001
    kw_n = g.k[1]
    sw, dw, pw = g.s[1], g.d[1], g.p[1]
    wp = max(g.iw + pw, (g.ow - 1) * sw + (kw_n - 1) * dw + 1)
    if sw == 1:
        return max(wp, g.ow + (kw_n - 1) * dw)
    return sw * -(-wp // sw)  # column phases: padded column q of a band row at (q % sw)*hw + q / sw


def _band_rows(g, wp: int, most: int) -> int:  # noqa: ANN001
    """The tallest band of at most ``most`` output rows whose input rows fit BAND_FLOATS."""
    rb = most
    while rb > 1 and _in_rows(g, rb) * wp > BAND_FLOATS:
        rb -= 1
    return rb


def _in_rows(g, rows: int | str) -> int | str:  # noqa: ANN001
    """Input rows a band of ``rows`` output rows reads (an int when ``rows`` is)."""
    reach = (g.k[0] - 1) * g.d[0] + 1
    if isinstance(rows, int):
        return (rows - 1) * g.s[0] + reach
    return f"({rows} - 1)*{g.s[0]} + {reach}"


def _channel(w: CWriter, g, src: RowSource, n: str, wt: str, b: str | None) -> None:  # noqa: ANN001
    w(f"const float *xc = {src.channel(n, 'c')};")
    w(f"const float *wc = {wt} + c*{g.k[0] * g.k[1]};")
    for t in range(g.k[0] * g.k[1]):
        w(f"const float w{t} = wc[{t}];")
    w(f"const float bv = {b}[c];" if b is not None else "const float bv = 0.0f;")


def emit_depthwise(w: CWriter, g, x: str, wt: str, b: str | None, chain: Chain, y: str,  # noqa: ANN001
                   zero: str | None = None, isa: tuple[Callable[..., bool], str] | None = None,
                   ) -> None:
    """The layer-by-layer kernel: every row of every channel, the fused ``chain`` on the way out.
    Given ``zero`` (a weight of IW zeros; see ``in_place``), each row read where the input holds
    it and each value through the chain as it is summed, else in bands. ``isa``: the ISA's rows
    in vectors (``IsaKernels.depthwise_float``) and the zero row they read, this C in their
    ``#else``."""
    src = RowSource.of(x, g.c, g.ih, g.iw)
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    _channel(w, g, src, "n", wt, b)
    _vectors_or(w, g, src, isa, None if isa is None else clamps([n for n, _ in chain.steps]),
                f"for (int oh = 0; oh < {g.oh}; ++oh)",
                f"{y} + (n*{g.c} + c)*{g.oh * g.ow} + oh*{g.ow}", zero,
                lambda: _portable(w, g, src, chain, y, zero))
    w.close()
    w.close()


def _portable(w: CWriter, g, src: RowSource, chain: Chain, y: str, zero: str | None) -> None:  # noqa: ANN001
    """A channel's rows in the portable C: read in place (``zero``) or in bands."""
    if zero is not None:
        w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)")
        w(f"float *yr = {y} + (n*{g.c} + c)*{g.oh * g.ow} + oh*{g.ow};")
        loads = operand_loads(w, chain, [o.strides for o in chain.operands],
                              ["n", "c", "oh", "0"])

        def out(col: str) -> None:
            if col != "i":
                w(f"const int i = {col};")
                w("(void)i;")
            w(f"yr[i] = {emit_steps(w, chain, 'v', loads)};")

        emit_row(w, FLOAT32, g, "oh", lambda ih: f"xc + {src.row(ih)}", zero, out)
        w.close()
    else:
        wp = _padded_width(g)
        rb = _band_rows(g, wp, g.oh)
        flat = chain.view([[0], [1], [2, 3]])
        full, rest = divmod(g.oh, rb)
        for rows, count, start in ((rb, full, 0), (rest, 1 if rest else 0, full * rb)):
            if count == 0:
                continue
            w.open(f"for (int t = 0; t < {count}; ++t)")
            w(f"const int oh0 = {start} + t*{rows};")
            _band(w, g, src, rows, rows, wp)
            _store_chain(w, g, rows, flat, chain, y)
            w.close()


def _vectors_or(w: CWriter, g, src: RowSource, isa: tuple[Callable[..., bool], str] | None,  # noqa: ANN001
                steps: list | None, loop: str, out_row: str, zero: str | None,
                portable: Callable[[], None]) -> None:
    """A channel's rows as the ISA's vectors (``isa``: ``IsaKernels.depthwise_float`` and the
    zero row it reads; ``steps``: the epilogue as clamps) over ``loop``'s rows ``oh``, each row's
    output at ``out_row``, ``portable()``'s C in their ``#else``; ``portable()`` alone where the
    ISA has none or does not take the conv."""
    def rows(body: Callable[[], None]) -> None:
        w.open(loop)
        row_pointers(w, g, "oh", lambda ih: f"xc + {src.row(ih)}", isa[1], "float")
        w(f"float *yr = {out_row};")
        body()
        w.close()

    def fallback() -> None:
        if isa is not None and zero is None:
            w(f"(void){isa[1]};  /* the zero row: the vectors' */")
        portable()

    if isa is None or not isa[0](w, g, steps, rows, fallback):
        fallback()


def in_place(g, isa: Isa) -> bool:  # noqa: ANN001
    """Whether the rows are read in place (the row nest of dwrow.py), layer by layer and as a
    cascade member: the float plan's decision (``opfuse.kernelplan.convf.depthwise_in_place``,
    which says why)."""
    return convf.depthwise_in_place(g, isa.scalar)


def zero_row(params: Params, g) -> str | None:  # noqa: ANN001
    """The weight of IW zeros an in-place row reads for a row outside the input, where the
    target's ISA reads rows in place (``in_place``); else None (bands)."""
    if not in_place(g, params.store.isa):
        return None
    return params.weight(f"dw:zrow:{g.iw}", np.zeros(g.iw, np.float32))


def isa_rows(params: Params, g) -> tuple[Callable[..., bool], str] | None:  # noqa: ANN001
    """The ISA's rows in vectors (``IsaKernels.depthwise_float``) and the zero row they read,
    or None where the ``[isa]`` record has none (``depthwise_rows``). The micro-kernel takes a
    conv where the float plan says so (``kernelplan.convf.depthwise_vectors``, which the cost
    reads too) and returns False elsewhere."""
    isa = params.store.isa
    if not isa.depthwise_rows:
        return None
    rows = kernels(isa).depthwise_float
    if rows is None:
        raise OpfuseError(f"C backend: [isa] '{isa.name}' says depthwise_rows = true but its "
                          f"module has no depthwise_float (docs/isa.md)")
    return rows, params.weight(f"dw:zrow:{g.iw}", np.zeros(g.iw, np.float32))


def emit_depthwise_rows(w: CWriter, g, src: RowSource, wt: str, b: str | None, sink: RowSink,  # noqa: ANN001
                        most: int, zero: str | None = None,
                        isa: tuple[Callable[..., bool], str, list] | None = None) -> None:
    """Rows ``a .. b`` (C variables of a cascade step, at most ``most`` of them) of every channel,
    stored through ``sink``. Given ``zero`` (a weight of IW zeros, for the rows outside the input;
    see ``in_place``), read where the source holds them, else in bands. ``isa``: the ISA's rows
    in vectors, the zero row they read and the sink's epilogue as clamps (``epilogue.clamps``),
    this C in their ``#else``."""
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    _channel(w, g, src, "0", wt, b)
    _vectors_or(w, g, src, isa and isa[:2], None if isa is None else isa[2],
                "for (int oh = a; oh <= b; ++oh)",
                f"{sink.dst.channel('0', 'c')} + {sink.dst.row('oh')}", zero,
                lambda: _member_portable(w, g, src, sink, most, zero))
    w.close()


def _member_portable(w: CWriter, g, src: RowSource, sink: RowSink, most: int,  # noqa: ANN001
                     zero: str | None) -> None:
    """A member's rows of a channel in the portable C: read in place (``zero``) or in bands."""
    if zero is not None:
        w.open("for (int oh = a; oh <= b; ++oh)")
        _row_in_place(w, g, src, sink, zero)
        w.close()
    else:
        wp = _padded_width(g)
        rb = _band_rows(g, wp, max(1, min(most, g.oh)))
        w.open(f"for (int oh0 = a; oh0 <= b; oh0 += {rb})")
        w(f"const int nr = b - oh0 + 1 < {rb} ? b - oh0 + 1 : {rb};")
        _store_sink(w, g, sink, _band(w, g, src, rb, "nr", wp))
        w.close()


def _row_in_place(w: CWriter, g, src: RowSource, sink: RowSink, zero: str) -> None:  # noqa: ANN001
    """Output row ``oh`` of channel ``c`` straight from the KH source rows it reads, through the
    epilogue into the sink: no band copy. The depthwise row nest both dtypes share (dwrow.py,
    over ``arith.FLOAT32``). A row outside the input reads ``zero``, a weight, not a literal:
    gcc, knowing a row's zeros, split the sum into unfused multiplies (1 ulp off the band's
    FMAs); the border columns are written out with the outside taps as 0.0f (an exact product).
    Each output is the band core's sum, term for term (``bv``, then the taps in (kh, kw) order),
    so the result is bit-identical."""
    w(f"float *yr = {sink.dst.channel('0', 'c')} + {sink.dst.row('oh')};")
    w("const int r = oh;  /* the epilogue's names: row r, column i */")
    w("(void)r;")

    def out(col: str) -> None:
        if col != "i":
            w(f"const int i = {col};")
            w("(void)i;")
        for line in sink.epilogue:
            w(line)
        w("yr[i] = v;")

    emit_row(w, FLOAT32, g, "oh", lambda ih: f"xc + {src.row(ih)}", zero, out)


def _band(w: CWriter, g, src: RowSource, cap: int, rows: int | str,  # noqa: ANN001
          wp: int) -> tuple[str, int]:
    """``u[rows*OW]`` = the band of ``rows`` (at most ``cap``) output rows from ``oh0``, + bias.

    A cascade's band (``rows`` a C variable) at stride 1 leaves its rows in ``t`` instead, ``wp``
    apart (no copy, no ``u`` on the stack); returns the buffer and the distance between its rows
    (the buffer named, not told by the distance: at KW 1 without padding ``wp`` is OW too)."""
    member = isinstance(rows, str)
    kh_n, kw_n = g.k
    (sh, sw), (dh, dw), (ph, pw) = g.s, g.d, g.p
    br = _in_rows(g, cap)
    w(f"float xp[{br * wp}] OPFUSE_ALIGNED;")  # gcc -march=native stores with aligned vector moves
    flat = g.s == (1, 1)
    if not (member and flat):
        w(f"float u[{cap * g.ow}] OPFUSE_ALIGNED;")
    # a tall band (layer by layer) is zeroed in one vector loop; a cascade's band of a row or
    # two writes each padded row once, its border zeroed (measured: the full fill cost a
    # 112-wide depthwise member 10%, the border loops a 14-wide layer-by-layer kernel 40%)
    if not member:
        w(f"for (int i = 0; i < {br * wp}; ++i) xp[i] = 0.0f;")
    w.open(f"for (int r = 0; r < {_in_rows(g, rows)}; ++r)")
    w(f"float *xq = xp + r*{wp};")
    w(f"const int ih = oh0*{sh} - {ph} + r;")
    if member:
        w.open(f"if (ih < 0 || ih >= {g.ih})")
        w(f"for (int i = 0; i < {wp}; ++i) xq[i] = 0.0f;")
        w("continue;")
        w.close()
    else:
        w(f"if (ih < 0 || ih >= {g.ih}) continue;")
    w(f"const float *xr = xc + {src.row('ih')};")
    if sw == 1:
        if member:
            _zero_outside(w, "xq", pw, pw + g.iw, wp)
        w(f"for (int i = 0; i < {g.iw}; ++i) xq[{pw} + i] = xr[i];")
    else:  # split the row into its sw column phases: the taps then load contiguous vectors
        hw = wp // sw
        for f in range(sw):
            j0 = next((j for j in range(hw) if j * sw + f >= pw), hw)
            j1 = max(j0, next((j for j in range(hw) if j * sw + f - pw >= g.iw), hw))
            if member:
                _zero_outside(w, f"xq + {f * hw}" if f else "xq", j0, j1, hw)
            if j0 < j1:
                w(f"for (int j = {j0}; j < {j1}; ++j) xq[{f * hw} + j] = xr[j*{sw} + {f - pw}];")
    w.close()

    def tap_sum(base: str, step: int) -> str:
        terms = ["bv"]
        for kh in range(kh_n):
            for kw in range(kw_n):
                col = kw * dw
                if step > 1:  # phase layout (see the band copy)
                    col = (col % step) * (wp // step) + col // step
                off = kh * dh * wp + col
                idx = base + (f" + {off}" if off else "")
                terms.append(f"w{kh * kw_n + kw} * xp[{idx}]")
        return " + ".join(terms)

    if flat:
        span = f"({rows} - 1)*{wp} + {g.ow}" if isinstance(rows, str) else (rows - 1) * wp + g.ow
        w(f"float t[{(cap - 1) * wp + g.ow}] OPFUSE_ALIGNED;")
        w(f"for (int q = 0; q < {span}; ++q) t[q] = {tap_sum('q', 1)};")
        if member:
            return "t", wp
        w(f"for (int r = 0; r < {rows}; ++r) for (int i = 0; i < {g.ow}; ++i) "
          f"u[r*{g.ow} + i] = t[r*{wp} + i];")
    else:
        w.open(f"for (int r = 0; r < {rows}; ++r)")
        w(f"const float *xr = xp + r*{sh * wp};")
        w(f"for (int i = 0; i < {g.ow}; ++i) u[r*{g.ow} + i] = "
          f"{tap_sum('i', sw).replace('xp[', 'xr[')};")
        w.close()
    return "u", g.ow


def _zero_outside(w: CWriter, row: str, lo: int, hi: int, width: int) -> None:
    """Zero columns ``[0, lo)`` and ``[hi, width)`` of ``row``."""
    for a, b in ((0, lo), (hi, width)):
        if a < b:
            w(f"for (int i = {a}; i < {b}; ++i) ({row})[i] = 0.0f;")


def _store_chain(w: CWriter, g, rows: int, flat, chain: Chain, y: str) -> None:  # noqa: ANN001
    plane = g.oh * g.ow
    if flat is not None:
        emit_apply(w, chain, flat, ["n", "c", f"oh0*{g.ow}"], rows * g.ow, lambda i: f"u[{i}]",
                   lambda i: f"{y}[(n*{g.c} + c)*{plane} + oh0*{g.ow} + {i}]")
        return
    vs = [o.strides for o in chain.operands]
    w.open(f"for (int r = 0; r < {rows}; ++r)")
    emit_apply(w, chain, vs, ["n", "c", "oh0 + r", "0"], g.ow, lambda i: f"u[r*{g.ow} + {i}]",
               lambda i: f"{y}[(n*{g.c} + c)*{plane} + (oh0 + r)*{g.ow} + {i}]")
    w.close()


def _store_sink(w: CWriter, g, sink: RowSink, band: tuple[str, int]) -> None:  # noqa: ANN001
    """The band's rows (``band``: the buffer and its row stride, from ``_band``) through the
    member's epilogue into its ring (row slot once per row)."""
    w.open("for (int q = 0; q < nr; ++q)")
    w("const int r = oh0 + q;")
    w("(void)r;")
    w(f"float *yr = {sink.dst.channel('0', 'c')} + {sink.dst.row('r')};")
    w.open(f"for (int i = 0; i < {g.ow}; ++i)")
    w(f"float v = {band[0]}[q*{band[1]} + i];")
    for line in sink.epilogue:
        w(line)
    w("yr[i] = v;")
    w.close()
    w.close()
