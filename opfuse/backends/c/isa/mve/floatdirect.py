"""A float conv over few input channels x taps (a network's stem: 3 -> 8 channels, 3x3, stride 2)
on Helium (isa/mve/floatconv.py): four output columns x four output channels a tile, each of the
IC x KH x KW taps one load (a gather at a stride) multiplied by the four channels' weights
(two LDRDs, ``[OC/4][IC][KH][KW][4]``) into four sums. Padding as the depthwise rows'
(floatdw.py): a row outside the input reads a zero row, a row's end vectors load under lane
predicates; the row pointers of every (input channel, kernel row) are formed once per output
row."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.mve.floatdw import row_vectors, store, tap_load
from opfuse.backends.c.isa.mve.floatepilogue import OCT, apply_clamps, open_images
from opfuse.backends.c.rowsource import RowSource

MAX_TAPS = 32  # input channels x kernel taps: the tile's weights at LDRD's immediate offsets


def fits(g) -> bool:  # noqa: ANN001
    return (g.group == 1 and g.c * g.k[0] * g.k[1] <= MAX_TAPS and g.oc % OCT == 0
            and g.s[1] <= 4 and g.k != (1, 1))


def direct(w: CWriter, g, src: RowSource, dst: RowSource, rows: tuple[str, str] | None,  # noqa: ANN001
           wp: str, b: str | None, steps) -> None:  # noqa: ANN001
    """Every output row (``rows`` None) or rows ``rows[0] .. rows[1]`` of a cascade's rings;
    ``wp`` the weights in blocks of four output channels."""
    kh_n, kw_n = g.k
    taps = g.c * kh_n * kw_n
    n = open_images(w, g, rows)
    w.open(f"for (int oh = 0; oh < {g.oh}; ++oh)" if rows is None else
           f"for (int oh = {rows[0]}; oh <= {rows[1]}; ++oh)")
    w(f"const float *rp[{g.c * kh_n}];")
    w.open(f"for (int ic = 0; ic < {g.c}; ++ic) for (int kh = 0; kh < {kh_n}; ++kh)")
    w(f"const int ih = oh*{g.s[0]} - {g.p[0]} + kh*{g.d[0]};")
    w(f"rp[ic*{kh_n} + kh] = ih >= 0 && ih < {g.ih} ? {src.channel(n, 'ic')} + {src.row('ih')} "
      ": zr;")
    w.close()
    w.open(f"for (int ob = 0; ob < {g.oc // OCT}; ++ob)")
    w(f"const float *wb = {wp} + ob*{taps * OCT};")
    for j in range(OCT):
        w(f"const float b{j} = {f'{b}[ob*{OCT} + {j}]' if b is not None else '0.0f'};")
    w(f"float *yo = {dst.channel(n, f'ob*{OCT}')} + {dst.row('oh')};")

    def vector(i0: str, masks: list[int], out: int) -> None:
        w.open("")
        for j in range(OCT):
            w(f"float32x4_t a{j} = vdupq_n_f32(b{j});")
        for ic in range(g.c):
            for kh in range(kh_n):
                if not any(masks):
                    continue
                w.open("")
                w(f"const float *r = rp[{ic * kh_n + kh}];")
                for kw in range(kw_n):
                    if not masks[kw]:
                        continue
                    t = (ic * kh_n + kh) * kw_n + kw
                    w.open("")
                    w("float w0, w1, w2, w3;")
                    w(f"OPFUSE_LDRD(w0, w1, wb, {t * OCT * 4});")
                    w(f"OPFUSE_LDRD(w2, w3, wb, {t * OCT * 4 + 8});")
                    w(f"const float32x4_t x = {tap_load(g, 'r', i0, kw, masks[kw])};")
                    for j in range(OCT):
                        w(f"a{j} = vfmaq_n_f32(a{j}, x, w{j});")
                    w.close()
                w.close()
        for j in range(OCT):
            apply_clamps(w, f"a{j}", steps)
            store(w, f"yo + {j * dst.stride} + {i0}", f"a{j}", out)
        w.close()

    row_vectors(w, g, vector)
    w.close()
    w.close()
    if rows is None:
        w.close()
