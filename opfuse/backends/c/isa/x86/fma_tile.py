"""The float conv cores' register tile in FMA vectors (``IsaKernels.fma_tile``): a tile
``acc[rows][lanes]`` of sums that a reduction loop nest updates as ``acc[r][l] += s * v[l]`` (per
term: row ``r``, a scalar C expression ``s`` broadcast to every lane, a vector operand ``v``
read as ``lanes`` consecutive floats).

gcc vectorizes the portable nests (convdirect.py's tile, pointwise.py's column tiles) over the
lanes but keeps half of a 12-16 register tile on the stack: every step of the reduction reloads
and re-stores those sums (on a Zen 4 host vww_96_float's 128 -> 128 pointwise conv ran at 44% of
the FMA peak). Here the tile lives in named vector variables for the whole nest, loaded from
``acc`` before it (the caller's initial values: zeros or the bias) and stored back after it, so
the caller's epilogue and store are unchanged:

* ``__AVX512F__``: zmm, 16 lanes a vector (a masked load and store for a last partial vector),
  at most ZMM_SUMS sums a pass; where a row has several vectors each step is an
  ``opfuse_x86_fma16`` (x86/helpers.py: inline asm that holds the operand vectors in registers,
  which gcc 12 sometimes did not);
* ``__AVX2__`` and ``__FMA__``: ymm, 8 lanes (``maskload``/``maskstore`` for a partial one), at
  most YMM_SUMS sums a pass (16 registers: the rest hold the vector operands and a broadcast);
* ``#else``: the caller's portable body.

A tile wider than a pass is reduced in several passes over the same nest, each over a band of
rows. Within a step the terms are grouped by vector operand: each operand's vectors are loaded
once and every row that reads it broadcasts its scalar and adds. Only the order of the sums'
roundings differs from the portable C (a fused multiply-add per term, as ``-ffp-contract=fast``
gives the portable C too)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.helpers import NO

ZMM_SUMS = 24  # of 32 zmm: the rest for the operands' vectors and the broadcast
YMM_SUMS = 12  # of 16 ymm
Term = tuple[int, str, str]  # (row, scalar C expression, C pointer to the vector operand)


class _Vec:
    """One vector width's spelling."""

    def __init__(self, bits: int, lanes: int) -> None:
        self.width = bits // 32
        self.t = f"__m{bits}"
        self.p = f"_mm{bits}_"
        self.lanes = lanes
        self.count = -(-lanes // self.width)
        self.tail = lanes - (self.count - 1) * self.width  # lanes of the last vector

    def fma(self, s: str, v: str, acc: str) -> str:
        """``acc + s * v``. zmm rows of several vectors: helpers' ``opfuse_x86_fma16``, which
        holds the operand vectors in registers (their broadcast ``s`` is one register for the
        row's vectors anyway). A row of one vector keeps the intrinsic: gcc folds its broadcast
        into the FMA (``{1to16}``), which the asm's register operand would forbid
        (mobilenet_v2_128_0.5's 16 x 16 pointwise tiles ran 0.75x with it). ymm: the
        intrinsic."""
        if self.width == 16 and self.count > 1:
            return f"opfuse_x86_fma16({acc}, {s}, {v})"
        return f"{self.p}fmadd_ps({s}, {v}, {acc})"

    def mask(self) -> str:
        if self.width == 16:
            return f"(__mmask16){(1 << self.tail) - 1:#x}"
        return "opfuse_fm"

    def load(self, ptr: str, k: int) -> str:
        at = f"{ptr} + {k * self.width}" if k else ptr
        if k < self.count - 1 or self.tail == self.width:
            return f"{self.p}loadu_ps({at})"
        if self.width == 16:
            return f"_mm512_maskz_loadu_ps({self.mask()}, {at})"
        return f"_mm256_maskload_ps({at}, {self.mask()})"

    def store(self, ptr: str, k: int, value: str) -> str:
        at = f"{ptr} + {k * self.width}" if k else ptr
        if k < self.count - 1 or self.tail == self.width:
            return f"{self.p}storeu_ps({at}, {value});"
        if self.width == 16:
            return f"_mm512_mask_storeu_ps({at}, {self.mask()}, {value});"
        return f"_mm256_maskstore_ps({at}, {self.mask()}, {value});"


def _pass(w: CWriter, vec: _Vec, acc: str, rows: Sequence[int], loops: Callable,
          terms: Sequence[Term], prefetch: tuple[str, int] | None = None) -> None:
    """One pass: the sums of ``rows`` in registers across the nest ``loops`` writes."""
    w.open("")
    if vec.width == 8 and vec.tail != 8:
        lanes = ", ".join("-1" if i < vec.tail else "0" for i in range(8))
        w(f"const __m256i opfuse_fm = _mm256_setr_epi32({lanes});")
    for r in rows:
        for k in range(vec.count):
            w(f"{vec.t} va{r}_{k} = {vec.load(f'&{acc}[{r}][0]', k)};")
    groups: dict[str, list[tuple[int, str]]] = {}
    for r, scalar, ptr in terms:
        if r in rows:
            groups.setdefault(ptr, []).append((r, scalar))

    def body() -> None:
        if prefetch is not None:
            w(f"_mm_prefetch((const char *){prefetch[0]}, _MM_HINT_T1);")
            w(f"{prefetch[0]} += {prefetch[1]};")
        for g, (ptr, uses) in enumerate(groups.items()):
            for k in range(vec.count):
                w(f"const {vec.t} vw{g}_{k} = {vec.load(ptr, k)};")
            for r, scalar in uses:
                w(f"const {vec.t} vs{g}_{r} = {vec.p}set1_ps({scalar});")
                for k in range(vec.count):
                    w(f"va{r}_{k} = {vec.fma(f'vs{g}_{r}', f'vw{g}_{k}', f'va{r}_{k}')};")

    loops(body)
    for r in rows:
        for k in range(vec.count):
            w(vec.store(f"&{acc}[{r}][0]", k, f"va{r}_{k}"))
    w.close()


def _passes(w: CWriter, vec: _Vec, acc: str, rows: int, sums: int, loops: Callable,
            terms: Sequence[Term], prefetch: tuple[str, int] | None) -> None:
    band = max(1, sums // vec.count)
    for r0 in range(0, rows, band):  # the first pass prefetches
        _pass(w, vec, acc, range(r0, min(rows, r0 + band)), loops, terms,
              prefetch if r0 == 0 else None)


def fma_tile(w: CWriter, acc: str, rows: int, lanes: int, loops: Callable[[Callable], None],
             terms: Sequence[Term], portable: Callable[[], None],
             prefetch: tuple[str, int] | None = None) -> bool:
    """``acc[r][l] += s * v[l]`` for every term (r, s, v) and lane l < ``lanes`` at each step of
    the loop nest ``loops(body)`` writes (it calls ``body()`` where a step goes): AVX-512 and
    AVX2 in registers, ``loops(portable)`` in the ``#else``. False (nothing written) for a tile
    of more than 4 vectors of 16 lanes a row or with no terms.

    ``prefetch`` (a C pointer variable, floats): at each step of the first pass the line at the
    pointer is prefetched to L2 (``prefetcht1``) and the pointer advanced (the caller's next
    weight block, convdirect.py's ``_prefetch``)."""
    if not terms or lanes > 64 or rows < 1:
        return False
    w.lines.append(f"#if {NO} && defined(__AVX512F__)")
    _passes(w, _Vec(512, lanes), acc, rows, ZMM_SUMS, loops, terms, prefetch)
    w.lines.append(f"#elif {NO} && defined(__AVX2__) && defined(__FMA__)")
    _passes(w, _Vec(256, lanes), acc, rows, YMM_SUMS, loops, terms, prefetch)
    w.lines.append("#else")
    loops(portable)
    w.lines.append("#endif")
    return True


def add_rows(w: CWriter, dst: str, parts: list[str], n: int) -> bool:
    """``dst[j] += ((parts[0][j] + parts[1][j]) + ...)`` for j < ``n`` in zmm (``n`` a multiple
    of 16) or ymm (of 8) adds, the same order of roundings as the portable loop in the #else.
    The MatMul core's split partial sums (matmul_tile.py): summed by that loop, gcc 12 took the
    sums out of the registers the reduction kept them in and added them lane by lane (112
    ``vaddss`` a 16-wide panel of 8 partial sums); ad01_fp32's dense layers ran 13.95 -> 11.68 us
    (Zen 4) in vectors. False for another ``n`` or no parts."""
    if not parts or n % 8:
        return False
    portable = f"{dst}[j] += {' + '.join(f'{p}[j]' for p in parts)};"
    for bits, guard in ((512, "__AVX512F__"), (256, "__AVX2__")):  # AVX2: the prelude's guard
        lanes, v = bits // 32, f"_mm{bits}_"
        if n % lanes:
            continue
        w.lines.append(f"{'#if' if bits == 512 or n % 16 else '#elif'} {NO} && defined({guard})")
        w.open(f"for (int j = 0; j < {n}; j += {lanes})")
        w(f"__m{bits} s = {v}loadu_ps({parts[0]} + j);")
        for p in parts[1:]:
            w(f"s = {v}add_ps(s, {v}loadu_ps({p} + j));")
        w(f"{v}storeu_ps({dst} + j, {v}add_ps({v}loadu_ps({dst} + j), s));")
        w.close()
    w.lines.append("#else")
    w(f"for (int j = 0; j < {n}; ++j) {{ {portable} }}")
    w.lines.append("#endif")
    return True
