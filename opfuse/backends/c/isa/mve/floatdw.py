"""A float depthwise conv's output rows on Helium (isa/mve/floatconv.py): four output columns of
one channel a vector, each kernel tap one load and one ``vfmaq_n_f32`` by its weight (held in a
core register for the whole channel). At a horizontal stride above 1 a tap's four columns are a
gather (``vldrwq_gather_shifted_offset_f32``, offsets 0, s, 2s, 3s).

Padding costs no copy: a row above or below the input reads a row of zeros on the stack, and a
vector at a row's ends loads its tap under a predicate of the lanes inside the row (a lane off
reads no memory and is zero), its store under ``vctp32q`` past the row's end; the vectors between,
every tap inside the row, run one loop with plain loads. Each output is the bias plus the taps in
(kh, kw) order, as the scalar kernel's sum. A cascade member's rows (``_member_rows``) run row by
row over the channels instead, each tap's weight loaded where a vector uses it."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.mve.floatepilogue import LANES, apply_clamps, open_images
from opfuse.backends.c.rowsource import RowSource

MAX_TAPS = 25  # kernels up to 5x5: their weights stay in core registers (or one stack reload)


def fits(g) -> bool:  # noqa: ANN001
    return (g.icg == 1 and g.ocg == 1 and g.k[0] * g.k[1] <= MAX_TAPS and g.s[1] <= 4
            and (g.ow - 1) * g.s[1] + (g.k[1] - 1) * g.d[1] < 1 << 16)


def _masks(g, i0: int) -> tuple[list[int], int]:  # noqa: ANN001
    """Per kernel column, the lanes of the vector at output column ``i0`` that read inside the
    row (bit l: lane l), and the lanes inside the output row."""
    out = sum(1 << lane for lane in range(LANES) if i0 + lane < g.ow)
    taps = []
    for kw in range(g.k[1]):
        cols = [(i0 + lane) * g.s[1] - g.p[1] + kw * g.d[1] for lane in range(LANES)]
        taps.append(sum(1 << lane for lane, c in enumerate(cols)
                        if 0 <= c < g.iw and out >> lane & 1))
    return taps, out


def _pred(mask: int) -> str:
    """An MVE predicate of these 32-bit lanes (four predicate bits a lane), through opfuse_pred
    (gcc 12.2 miscompiles a constant mve_pred16_t; isa/mve/__init__.py)."""
    bits = sum(0xF << (4 * lane) for lane in range(LANES) if mask >> lane & 1)
    return f"opfuse_pred(0x{bits:04x}u)"


def tap_load(g, row: str, i0: str, kw: int, mask: int) -> str:  # noqa: ANN001
    """The four input columns kernel column ``kw`` reads for output columns ``i0``.. of ``row``
    (a row pointer), lanes outside ``mask`` zero: a load, or at a stride a gather by ``go``."""
    full = (1 << LANES) - 1
    sw = g.s[1]
    off = kw * g.d[1] - g.p[1]
    base = f"{row} + {i0}*{sw}" if sw > 1 else f"{row} + {i0}"
    base += f" + {off}" if off > 0 else f" - {-off}" if off < 0 else ""
    if sw > 1:
        return (f"vldrwq_gather_shifted_offset_f32({base}, go)" if mask == full else
                f"vldrwq_gather_shifted_offset_z_f32({base}, go, {_pred(mask)})")
    return f"vld1q_f32({base})" if mask == full else f"vldrwq_z_f32({base}, {_pred(mask)})"


def store(w: CWriter, at: str, v: str, out: int) -> None:
    """Store vector ``v`` at ``at``, its lanes past the row's end (``out``) not written."""
    if out == (1 << LANES) - 1:
        w(f"vst1q_f32({at}, {v});")
    else:
        w(f"vstrwq_p_f32({at}, {v}, vctp32q({bin(out).count('1')}u));")


def row_vectors(w: CWriter, g, vector) -> None:  # noqa: ANN001
    """``vector(i0, taps, out)`` for every output vector of a row: the first run of vectors with
    every tap inside the row as one loop over ``i``, the others written out with their masks."""
    full = (1 << LANES) - 1
    vectors = [(i0, *_masks(g, i0)) for i0 in range(0, g.ow, LANES)]
    inside = [v[2] == full and all(m == full for m in v[1]) for v in vectors]
    lo = hi = -1
    if any(inside):
        first = inside.index(True)
        last = first
        while last + 1 < len(inside) and inside[last + 1]:
            last += 1
        lo, hi = first * LANES, (last + 1) * LANES
    for i0, taps, out in vectors:
        if lo <= i0 < hi:
            if i0 == lo:
                w.open(f"for (int i = {lo}; i < {hi}; i += {LANES})")
                vector("i", [full] * g.k[1], full)
                w.close()
            continue
        vector(str(i0), taps, out)


def _vector(w: CWriter, g, i0: str, taps: list[int], out: int, steps,  # noqa: ANN001
            weight: str = "w{}") -> None:
    """The output vector at column ``i0`` (a C expression) of row ``oh``; ``weight``: how tap t's
    weight is spelled (a core register ``w{t}``, or its load ``wc[{t}]``)."""
    w.open("")
    w("float32x4_t s = vdupq_n_f32(bv);")
    for kh in range(g.k[0]):
        for kw in range(g.k[1]):
            if taps[kw]:
                w(f"s = vfmaq_n_f32(s, {tap_load(g, f'r{kh}', i0, kw, taps[kw])}, "
                  f"{weight.format(kh * g.k[1] + kw)});")
    apply_clamps(w, "s", steps)
    store(w, f"yr + {i0}", "s", out)
    w.close()


def depthwise(w: CWriter, g, src: RowSource, dst: RowSource, rows: tuple[str, str] | None,  # noqa: ANN001
              wt: str, b: str | None, steps) -> None:  # noqa: ANN001
    """Every output row of every channel (``rows`` None), or rows ``rows[0] .. rows[1]`` of a
    cascade's rings (module docstring); ``wt`` the weights [C][KH*KW]."""
    kk = g.k[0] * g.k[1]
    n = open_images(w, g, rows)
    if rows is not None:
        _member_rows(w, g, src, dst, rows, wt, b, steps)
        return
    w.open(f"for (int c = 0; c < {g.c}; ++c)")
    w(f"const float *xc = {src.channel(n, 'c')};")
    w(f"float *yc = {dst.channel(n, 'c')};")
    w(f"const float *wc = {wt} + c*{kk};")
    for t in range(kk):
        w(f"const float w{t} = wc[{t}];")
    w(f"const float bv = {f'{b}[c]' if b is not None else '0.0f'};")
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)" if rows is None else
           f"for (int oh = {rows[0]}; oh <= {rows[1]}; ++oh)")
    for kh in range(g.k[0]):
        w(f"const int ih{kh} = oh*{g.s[0]} + {kh * g.d[0] - g.p[0]};")
        w(f"const float *r{kh} = ih{kh} >= 0 && ih{kh} < {g.ih} ? xc + {src.row(f'ih{kh}')} "
          ": zr;")
    w(f"float *yr = yc + {dst.row('oh')};")
    row_vectors(w, g, lambda i0, taps, out: _vector(w, g, i0, taps, out, steps))
    w.close()
    w.close()
    if rows is None:
        w.close()


def _member_rows(w: CWriter, g, src: RowSource, dst: RowSource, rows: tuple[str, str],  # noqa: ANN001
                 wt: str, b: str | None, steps) -> None:  # noqa: ANN001
    """A cascade member's rows, row by row: the row's ring slots and zero rows formed once, then
    every channel, its row pointers stepped by a channel's stride (a row inside the input is
    inside for every channel) and each tap's weight loaded where a vector uses it. The
    whole-tensor order (channels outer, the nine taps in registers for all of a channel's rows)
    pays a channel's setup per row in a cascade's one-row band, and gcc 12.2 (-O2) spilled the
    taps to the stack to reload them for each vector anyway: mobilenet_v2_128_0.5's depthwise
    members on cortex-m55 ran 1.06-1.83x their layer-by-layer kernel's instructions."""
    w.open(f"for (int oh = {rows[0]}; oh <= {rows[1]}; ++oh)")
    for kh in range(g.k[0]):
        w(f"const int ih{kh} = oh*{g.s[0]} + {kh * g.d[0] - g.p[0]};")
        w(f"const int in{kh} = ih{kh} >= 0 && ih{kh} < {g.ih};")
        w(f"const float *r{kh} = in{kh} ? {src.channel('0', '0')} + {src.row(f'ih{kh}')} : zr;")
        w(f"const int d{kh} = in{kh} ? {src.stride} : 0;")
    w(f"float *yr = {dst.channel('0', '0')} + {dst.row('oh')};")
    w(f"const float *wc = {wt};")
    stepped = ", ".join([f"r{kh} += d{kh}" for kh in range(g.k[0])]
                        + [f"yr += {dst.stride}", f"wc += {g.k[0] * g.k[1]}"])
    w.open(f"for (int c = 0; c < {g.c}; ++c, {stepped})")
    w(f"const float bv = {f'{b}[c]' if b is not None else '0.0f'};")
    row_vectors(w, g, lambda i0, taps, out: _vector(w, g, i0, taps, out, steps, "wc[{}]"))
    w.close()
    w.close()
