"""A float depthwise conv's output rows in vector registers (``IsaKernels.depthwise_float``),
under ``__AVX512F__`` (zmm), else ``__AVX2__ && __FMA__`` (ymm), with the portable C (dwconv.py:
the band core, or the row nest of dwrow.py) in the ``#else``.

Sixteen (eight) output columns of one channel a vector, read in place: each tap of a vector is
one load of its row (``r<kh>``, dwrow.row_pointers: a row above or below the input is the zero
row) and one ``vfmadd`` by the tap's broadcast weight; at a horizontal stride of 2 a tap is two
loads and one ``vpermt2ps`` keeping the even lanes (ymm: a ``vshufps`` and a ``vpermpd``). The
vectors whose taps all lie inside the row run one loop with plain loads; those at a row's ends
are written out, each tap loaded under the mask of the lanes inside the row (ymm:
``vmaskmovps``; a lane off reads no memory and is 0.0f, the product the row nest writes for a
tap outside the row), the store under the mask of the lanes inside the output row. Each output
is the bias plus the taps in (kh, kw) order, as the portable sums; the clamps of a Relu / Clip
epilogue (``epilogue.clamps``) are a compare and a blend each, which keep NaN as the scalar
chain's selects do. No band copy and no scalar column: the band core's copy and the row nest's
scalar border columns and remainders were what the vector unit paid
(benchmarks/dw_row_vectors.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.helpers import NO
from opfuse.kernelplan.convf import depthwise_vectors


@dataclass(frozen=True)
class Vec:
    """One vector width's spelling: its guard, lanes and the intrinsics the rows use."""

    guard: str
    lanes: int
    type: str
    prefix: str  # _mm512 / _mm256

    def mask_load(self, m: int, at: str) -> str:
        """The lanes of ``m`` loaded from ``at``, the others 0.0f without a read."""
        if self.lanes == 16:
            return f"_mm512_maskz_loadu_ps((__mmask16){m:#x}, {at})"
        return f"_mm256_maskload_ps({at}, {self._lanes(m)})"

    def even(self, a: str, b: str) -> str:
        """The even lanes of ``a`` then of ``b`` (a tap's columns at stride 2)."""
        if self.lanes == 16:
            return f"_mm512_permutex2var_ps({a}, even, {b})"
        return (f"_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd("
                f"_mm256_shuffle_ps({a}, {b}, 0x88)), 0xD8))")

    def clamp(self, v: str, bound: str, op: str) -> str:
        """``v = v OP bound ? bound : v`` (NaN keeps ``v``, as the scalar chain's select)."""
        b = f"{self.prefix}_set1_ps({bound})"
        if self.lanes == 16:
            return f"{v} = _mm512_mask_blend_ps(_mm512_cmp_ps_mask({v}, {b}, {op}), {v}, {b});"
        return f"{v} = _mm256_blendv_ps({v}, {b}, _mm256_cmp_ps({v}, {b}, {op}));"

    def store(self, at: str, v: str, m: int) -> str:
        if m == (1 << self.lanes) - 1:
            return f"{self.prefix}_storeu_ps({at}, {v});"
        if self.lanes == 16:
            return f"_mm512_mask_storeu_ps({at}, (__mmask16){m:#x}, {v});"
        return f"_mm256_maskstore_ps({at}, {self._lanes(m)}, {v});"

    def _lanes(self, m: int) -> str:
        bits = ", ".join("-1" if m >> lane & 1 else "0" for lane in range(self.lanes))
        return f"_mm256_setr_epi32({bits})"


ZMM = Vec(f"{NO} && defined(__AVX512F__)", 16, "__m512", "_mm512")
YMM = Vec(f"{NO} && defined(__AVX2__) && defined(__FMA__)", 8, "__m256", "_mm256")
EVEN = "_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)"


def _mask(g, vec: Vec, i0: int, kw: int, half: int) -> int:  # noqa: ANN001
    """Lanes of load ``half`` (stride 2: 0 or 1) that a valid output lane reads inside the row."""
    n = vec.lanes
    x0 = i0 * g.s[1] - g.p[1] + kw * g.d[1] + half * n
    bits = 0
    for lane in range(n):
        pos = half * n + lane
        if pos % g.s[1] or i0 + pos // g.s[1] >= g.ow:
            continue
        if 0 <= x0 + lane < g.iw:
            bits |= 1 << lane
    return bits


def _inside(g, vec: Vec, i0: int) -> bool:  # noqa: ANN001
    """Every lane of the vector at ``i0`` is an output column and every position it loads lies
    inside the row (plain loads)."""
    n = vec.lanes
    return i0 + n <= g.ow and all(
        0 <= i0 * g.s[1] - g.p[1] + kw * g.d[1] + j < g.iw
        for kw in range(g.k[1]) for j in range(n * g.s[1]))


def _vector(w: CWriter, g, vec: Vec, i0: str, masks: list[list[int]] | None,  # noqa: ANN001
            steps: list[tuple[str | None, str | None]], out: int) -> None:
    """The output vector at column ``i0`` (a C expression) of row ``yr``: ``masks[kw][half]``
    the loads' lanes (None: every lane, plain loads), ``out`` the lanes stored."""
    sw, full = g.s[1], (1 << vec.lanes) - 1
    w.open("")
    w(f"{vec.type} s = vb;")
    for kh in range(g.k[0]):
        for kw in range(g.k[1]):
            if masks is not None and not any(masks[kw]):
                continue  # every lane of this tap outside the row: a product by 0.0f
            off = kw * g.d[1] - g.p[1]
            base = f"r{kh} + {i0}*{sw}" if sw > 1 else f"r{kh} + {i0}"
            base += f" + {off}" if off > 0 else f" - {-off}" if off < 0 else ""
            loads = []
            for half in range(sw):
                at = f"{base} + {half * vec.lanes}" if half else base
                m = full if masks is None else masks[kw][half]
                loads.append(f"{vec.prefix}_setzero_ps()" if m == 0 else
                             f"{vec.prefix}_loadu_ps({at})" if m == full else
                             vec.mask_load(m, at))
            tap = loads[0] if sw == 1 else vec.even(loads[0], loads[1])
            w(f"s = {vec.prefix}_fmadd_ps(vw{kh * g.k[1] + kw}, {tap}, s);")
    for lo, hi in steps:
        if lo is not None:
            w(vec.clamp("s", lo, "_CMP_LT_OQ"))
        if hi is not None:
            w(vec.clamp("s", hi, "_CMP_GT_OQ"))
    w(vec.store(f"yr + {i0}", "s", out))
    w.close()


def _rows(w: CWriter, g, vec: Vec, steps, rows: Callable[[Callable[[], None]], None]) -> None:  # noqa: ANN001
    """The channel's rows in vectors of ``vec`` (the branch under its guard)."""
    w.open("")
    for t in range(g.k[0] * g.k[1]):
        w(f"const {vec.type} vw{t} = {vec.prefix}_set1_ps(w{t});")
    w(f"const {vec.type} vb = {vec.prefix}_set1_ps(bv);")
    if g.s[1] == 2 and vec.lanes == 16:
        w(f"const __m512i even = {EVEN};")
    starts = list(range(0, g.ow, vec.lanes))
    inside = [_inside(g, vec, i0) for i0 in starts]

    def body() -> None:
        k = 0
        while k < len(starts):
            if inside[k]:
                j = k
                while j + 1 < len(starts) and inside[j + 1]:
                    j += 1
                w.open(f"for (int i = {starts[k]}; i <= {starts[j]}; i += {vec.lanes})")
                _vector(w, g, vec, "i", None, steps, (1 << vec.lanes) - 1)
                w.close()
                k = j + 1
                continue
            i0 = starts[k]
            masks = [[_mask(g, vec, i0, kw, half) for half in range(g.s[1])]
                     for kw in range(g.k[1])]
            out = sum(1 << lane for lane in range(vec.lanes) if i0 + lane < g.ow)
            _vector(w, g, vec, str(i0), masks, steps, out)
            k += 1

    rows(body)
    w.close()


def depthwise_float(w: CWriter, g, steps: list[tuple[str | None, str | None]] | None,  # noqa: ANN001
                    rows: Callable[[Callable[[], None]], None],
                    portable: Callable[[], None]) -> bool:
    """A channel's output rows (after dwconv's channel setup: scalars ``w<t>`` and ``bv``):
    ``rows(body)`` opens the loop over them and declares, per row, ``r<kh>`` and ``yr`` before
    calling ``body()``; ``steps`` the epilogue's clamps. ``portable()`` writes the C of the
    ``#else``. False (nothing written) where the float plan says the rows are not in vectors
    (``kernelplan.convf.depthwise_vectors``: the stride not 1 or 2, the kernel larger than 7x7
    or the epilogue not clamps alone)."""
    if not depthwise_vectors(g, True, steps is not None):
        return False
    w.lines.append(f"#if {ZMM.guard}")
    _rows(w, g, ZMM, steps, rows)
    w.lines.append(f"#elif {YMM.guard}")
    _rows(w, g, YMM, steps, rows)
    w.lines.append("#else")
    portable()
    w.lines.append("#endif")
    return True
