"""A float depthwise conv's output rows in zmm registers (``IsaKernels.depthwise_float``), under
``__AVX512F__`` with the portable C (dwconv.py: the band core, or the row nest of dwrow.py) in
the ``#else``.

Sixteen output columns of one channel a vector, read in place: each tap of a vector is one load
of its row (``r<kh>``, dwrow.row_pointers: a row above or below the input is the zero row) and
one ``vfmadd`` by the tap's broadcast weight; at a horizontal stride of 2 a tap is two loads and
one ``vpermt2ps`` keeping the even lanes. The vectors whose taps all lie inside the row run one
loop with plain loads; those at a row's ends are written out, each tap loaded under the mask of
the lanes inside the row (a lane off reads no memory and is 0.0f, the product the row nest
writes for a tap outside the row), the store under the mask of the lanes inside the output row.
Each output is the bias plus the taps in (kh, kw) order, as the portable sums; the clamps of a
Relu / Clip epilogue (``epilogue.clamps``) are a compare and a blend each, which keep NaN as the
scalar chain's selects do. No band copy and no scalar column: the band core's copy and the row
nest's scalar border columns and remainders were what the vector unit paid
(benchmarks/dw_row_vectors.py)."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.helpers import NO

GUARD = f"{NO} && defined(__AVX512F__)"
LANES = 16
EVEN = "_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)"
MAX_TAPS = 49  # kernels up to 7x7


def fits(g) -> bool:  # noqa: ANN001
    return g.s[1] in (1, 2) and g.k[0] * g.k[1] <= MAX_TAPS


def _loads(g, i0: int, kw: int) -> list[int]:  # noqa: ANN001
    """The input columns the vector at output column ``i0`` loads for kernel column ``kw``
    (stride 2: both vectors, even and odd positions)."""
    x0 = i0 * g.s[1] - g.p[1] + kw * g.d[1]
    return [x0 + j for j in range(LANES * g.s[1])]


def _mask(g, i0: int, kw: int, half: int) -> int:  # noqa: ANN001
    """Lanes of load ``half`` (stride 2: 0 or 1) that a valid output lane reads inside the row."""
    x0 = i0 * g.s[1] - g.p[1] + kw * g.d[1] + half * LANES
    bits = 0
    for lane in range(LANES):
        pos = half * LANES + lane
        if pos % g.s[1] or i0 + pos // g.s[1] >= g.ow:
            continue
        if 0 <= x0 + lane < g.iw:
            bits |= 1 << lane
    return bits


def _inside(g, i0: int) -> bool:  # noqa: ANN001
    """Every lane of the vector at ``i0`` is an output column and every position it loads lies
    inside the row (plain loads)."""
    return i0 + LANES <= g.ow and all(0 <= x < g.iw for kw in range(g.k[1])
                                      for x in _loads(g, i0, kw))


def _vector(w: CWriter, g, i0: str, masks: list[list[int]] | None,  # noqa: ANN001
            steps: list[tuple[str | None, str | None]], out: int) -> None:
    """The output vector at column ``i0`` (a C expression) of row ``yr``: ``masks[kw][half]``
    the loads' lanes (None: every lane, plain loads), ``out`` the lanes stored."""
    sw = g.s[1]
    w.open("")
    w("__m512 s = vb;")
    for kh in range(g.k[0]):
        for kw in range(g.k[1]):
            off = kw * g.d[1] - g.p[1]
            base = f"r{kh} + {i0}*{sw}" if sw > 1 else f"r{kh} + {i0}"
            base += f" + {off}" if off > 0 else f" - {-off}" if off < 0 else ""
            loads = []
            for half in range(sw):
                at = f"{base} + {half * LANES}" if half else base
                m = None if masks is None else masks[kw][half]
                if m == 0:
                    loads.append("_mm512_setzero_ps()")
                elif m is None or m == (1 << LANES) - 1:
                    loads.append(f"_mm512_loadu_ps({at})")
                else:
                    loads.append(f"_mm512_maskz_loadu_ps((__mmask16){m:#x}, {at})")
            tap = loads[0] if sw == 1 else \
                f"_mm512_permutex2var_ps({loads[0]}, even, {loads[1]})"
            if masks is not None and all(m == 0 for m in masks[kw]):
                continue  # every lane of this tap outside the row: a product by 0.0f
            w(f"s = _mm512_fmadd_ps(vw{kh * g.k[1] + kw}, {tap}, s);")
    for lo, hi in steps:
        if lo is not None:
            w(f"s = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(s, _mm512_set1_ps({lo}), "
              f"_CMP_LT_OQ), s, _mm512_set1_ps({lo}));")
        if hi is not None:
            w(f"s = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(s, _mm512_set1_ps({hi}), "
              f"_CMP_GT_OQ), s, _mm512_set1_ps({hi}));")
    if out == (1 << LANES) - 1:
        w(f"_mm512_storeu_ps(yr + {i0}, s);")
    else:
        w(f"_mm512_mask_storeu_ps(yr + {i0}, (__mmask16){out:#x}, s);")
    w.close()


def depthwise_float(w: CWriter, g, steps: list[tuple[str | None, str | None]] | None,  # noqa: ANN001
                    rows: Callable[[Callable[[], None]], None],
                    portable: Callable[[], None]) -> bool:
    """A channel's output rows (after dwconv's channel setup: scalars ``w<t>`` and ``bv``):
    ``rows(body)`` opens the loop over them and declares, per row, ``r<kh>`` and ``yr`` before
    calling ``body()``; ``steps`` the epilogue's clamps. ``portable()`` writes the C of the
    ``#else``. False (nothing written) when the stride is not 1 or 2, the kernel larger than
    7x7 or the epilogue not clamps alone."""
    if steps is None or not fits(g):
        return False
    w.lines.append(f"#if {GUARD}")
    w.open("")
    for t in range(g.k[0] * g.k[1]):
        w(f"const __m512 vw{t} = _mm512_set1_ps(w{t});")
    w("const __m512 vb = _mm512_set1_ps(bv);")
    if g.s[1] == 2:
        w(f"const __m512i even = {EVEN};")
    full = (1 << LANES) - 1
    starts = list(range(0, g.ow, LANES))
    inside = [_inside(g, i0) for i0 in starts]

    def body() -> None:
        k = 0
        while k < len(starts):
            if inside[k]:
                j = k
                while j + 1 < len(starts) and inside[j + 1]:
                    j += 1
                w.open(f"for (int i = {starts[k]}; i <= {starts[j]}; i += {LANES})")
                _vector(w, g, "i", None, steps, full)
                w.close()
                k = j + 1
                continue
            i0 = starts[k]
            masks = [[_mask(g, i0, kw, half) for half in range(g.s[1])] for kw in range(g.k[1])]
            out = sum(1 << lane for lane in range(LANES) if i0 + lane < g.ow)
            _vector(w, g, str(i0), masks, steps, out)
            k += 1

    rows(body)
    w.close()
    w.lines.append("#else")
    portable()
    w.lines.append("#endif")
    return True
