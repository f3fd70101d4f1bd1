"""The register-blocked float matrix core: ``Y[m, n] = sum_k A[m, k] * B[k, n]`` in MR x NR tiles.

docs/architecture.md, "The float MatMul/Gemm core". Each tile keeps MR rows of NR output columns in MR named
local arrays (``c0[NR]`` .. ``c{MR-1}[NR]``) and, per k, loads NR floats of B once and MR floats
of A (one per row), so every B load feeds MR multiply-adds: gcc -O3 turns the contiguous loop over
the NR columns into vector FMAs on registers (plain C99, no intrinsics; one local array per row
rather than one ``acc[MR][NR]``, which gcc kept in memory: 0.43 ms vs 1.26 ms on a 197x192x768
product, Zen 4). The epilogue (bias, activation, residual...) runs on each row of the tile before
its single store (``epilogue.emit_apply``).

A constant B is packed at generation time into NR-wide panels in the order the tile reads it,
``[n // NR][k][NR]`` then the last ``n % NR`` columns as ``[k][n % NR]`` (``panel_strides``, the
one formula that ``pack_panels``, the tile's reads and attention's run-time K^T packing share); on
the host, when there is a full panel, that last panel is zero-padded to NR columns (``pads_tail``: its sums run as
wide as a full panel's and only its ``n % NR`` columns are stored; a 3136 x 160 x 40 product took
0.87 ms with an 8-wide tail and 0.33 padded, Zen 4, at most NR - 1 more columns of weights); a
runtime B with contiguous columns is read in place, row ``kk`` of a
panel at ``kk * ldb``. Rows are taken in blocks of MC (``MC * K`` floats of A stay in cache while
every panel of B passes over them); the last block, the last tile of fewer than MR rows and the
last panel of fewer than NR columns are emitted as their own loops with constant sizes, so no
remainder is tested at run time. A runtime B with strided columns (attention's ``Q @ K^T`` read
through a Transpose) is copied panel by panel into a stack panel of ``k * NR`` floats, once per
block of rows (``PANEL_FLOATS`` bounds it). The tile is the ISA record's ``matmul_tile``
(opfuse/targets/isa.py): on a scalar FPU (``Isa.scalar``, Cortex-M4/M7: 32 single registers) 4 x 4 with its sums in
named scalars (``_scalar_sums``); on a vector ISA 4 x 16, and its rows may be the C
preprocessor's choice where the ISA module offers a wider tile (``IsaKernels.matmul_wide``: x86's
8 rows under AVX-512, isa/x86.py, with the measurements). The rows of a block are whole tiles of
either.

``emit_core`` takes its operands as pointers and strides (``Operands``) and its store as an
``Output``, so a kernel other than matmul.py's (the attention core's Q @ K^T or P @ V) can call it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from opfuse.backends.c.cgen import CWriter, block_loops, blocks, flit, offset_expr
from opfuse.backends.c.epilogue import Chain, emit_apply
from opfuse.backends.c.isa import kernels
from opfuse.targets.isa import Isa

BLOCK_A_FLOATS = 64 * 1024  # MC * K: a 256 KB block of A rows (an L2's share)
PANEL_FLOATS = 4096  # a stack panel of a strided runtime B (k * NR floats)
SCALAR_NR = 4  # panels this narrow (the board's) keep their sums in named scalars
# an anchor+norm kernel's rows waiting for their norm, on the stack: 16 KB on a board; 128 KB on
# the host, where a block of only 16 KB of rows (8 of Whisper's 384) streamed all of B per block
BOARD_ROW_FLOATS, HOST_ROW_FLOATS = 4096, 32768

RowHook = Callable[[CWriter, str], None]  # matmul.RowHook: called with each finished row's offset
AddRows = Callable[[CWriter, str, list[str], int], bool]  # IsaKernels.add_rows


def tile_shape(isa: Isa) -> tuple[int, int]:
    """(MR, NR): the ISA record's tile (``[isa] matmul_tile``)."""
    return isa.matmul_tile


def pads_tail(n: int, isa: Isa) -> bool:
    """Whether a packed B's last panel of fewer than NR columns is zero-padded to NR (module
    docstring): on the host, when there is at least one full panel."""
    nr = tile_shape(isa)[1]
    return not isa.scalar and n >= nr and n % nr != 0


def panel_strides(k: int, width: int) -> tuple[int, int, int]:
    """The packed layout, the one formula its writers and the tile's reads share: B[kk, n0 + j]
    of the panel of ``width`` columns from column n0 (``blocks(n, NR)``) is element
    ``n0*k + kk*width + j``, as strides of (n0, kk, j); the panels before it hold n0*k floats."""
    return k, width, 1


def pack_panels(kn: np.ndarray, nr: int, pad: bool = False) -> np.ndarray:
    """``kn`` (k, n) as the panels the tile reads: full NR-wide panels, then the remainder
    (with ``pad``, as one more NR-wide panel whose last columns are zeros)."""
    k, n = kn.shape
    packed = np.zeros(k * (-(-n // nr) * nr if pad else n), np.float32)
    kk = np.arange(k)[None, :, None]
    for width, count, start in blocks(n, nr):
        s_n0, s_kk, s_j = panel_strides(k, nr if pad else width)
        n0 = (start + np.arange(count) * width)[:, None, None]
        at = n0 * s_n0 + kk * s_kk + np.arange(width)[None, None, :] * s_j
        cols = kn[:, start:start + count * width].reshape(k, count, width).transpose(1, 0, 2)
        packed[at] = cols
    return packed


@dataclass(frozen=True)
class Operands:
    """Where the core reads: A at ``a + m*a_m + kk*a_k``; B packed (``packed``) or at
    ``b + kk*b_k + n*b_n`` (``b_n`` != 1: each panel is first copied into a stack panel).
    ``padded``: the packed B's last panel is NR wide (``pack_panels(pad=True)``)."""

    a: str
    a_m: int
    a_k: int
    b: str
    b_k: int
    packed: bool
    b_n: int = 1
    padded: bool = False


@dataclass(frozen=True)
class Output:
    """Where the tile's rows go, and what runs on them before the store. ``batch``: the batch
    coordinates of the chain's output shape; ``y_row(m)`` the element offset of row m in ``y``;
    ``scale``/``bias``: a Gemm's alpha (runtime B) and ``(ptr, (m, n) strides, beta)``;
    ``row_scale(m)``: a factor of row m (attention's 1 / sum of a softmax row)."""

    chain: Chain
    batch: tuple[str, ...]
    y: str
    y_row: Callable[[str], str]
    scale: str | None = None
    bias: tuple[str, tuple[int, int], float] | None = None
    row_scale: Callable[[str], str] | None = None


def emit_core(w: CWriter, src: Operands, out: Output, m: int, n: int, k: int,
              isa: Isa, after_row: RowHook | None = None,
              row_of: Callable[[str], str] | None = None, into_row: bool = False) -> None:
    """All of ``Y = A @ B`` for one batch coordinate (module docstring). With ``after_row``,
    each block of rows is finished across all panels, then ``after_row(w, row_of("m"))`` runs
    with ``m`` declared for each of its rows; with ``into_row`` the rows are stored in a stack
    buffer (``orow`` points at row m's) instead of ``y``."""
    mr, nr = tile_shape(isa)
    wide = kernels(isa).matmul_wide
    mc = min(m, BLOCK_A_FLOATS // max(k, 1))
    if into_row:  # the rows wait in a stack buffer for the hook: a block fits in it
        mc = min(mc, (BOARD_ROW_FLOATS if isa.scalar else HOST_ROW_FLOATS) // max(n, 1))
    step = wide[0] if wide else mr  # a block is whole tiles of either tile
    mc = max(step, mc // step * step)
    mc = min(mc, m)
    for rows in block_loops(w, m, mc, "mb", "m1"):
        if into_row:
            w(f"float orows[{rows * n}];")
        _block(w, src, out, rows, n, k, (mr, nr, wide), into_row, kernels(isa).add_rows)
        if after_row is not None:
            w.open(f"for (int r = 0; r < {rows}; ++r)")
            w("const int m = m1 + r;")
            if into_row:
                w(f"const float *orow = orows + r*{n};")
            after_row(w, (row_of or out.y_row)("m"))
            w.close()


def _block(w: CWriter, src: Operands, out: Output, rows: int, n: int, k: int,
           tiles: tuple[int, int, tuple[int, str] | None], into_row: bool,
           add: AddRows | None = None) -> None:
    """Rows ``m1 .. m1+rows`` of Y: every panel of B over the block's tiles of MR rows
    (``tiles``: MR, NR and the ISA's wider tile, ``IsaKernels.matmul_wide``; ``add``: the ISA's
    ``add_rows``, or None)."""
    mr, nr, wide_tile = tiles
    for width in block_loops(w, n, nr, "p", "n0"):
        wide = nr if src.packed and src.padded else width  # a padded panel: NR-wide sums
        if src.packed:  # panel p starts after p full panels of k*NR floats
            s_n0, b_k, _ = panel_strides(k, wide)
            w(f"const float *bp = {src.b} + n0*{s_n0};")
        elif src.b_n != 1:  # strided columns (a transposed view): packed once per block
            w(f"float bt[{k * width}];")
            w(f"for (int kk = 0; kk < {k}; ++kk) for (int j = 0; j < {width}; ++j) "
              f"bt[kk*{width} + j] = {src.b}[{offset_expr(['kk', '(n0 + j)'], [src.b_k, src.b_n])}];")
            w("const float *bp = bt;")
            b_k = width
        else:
            w(f"const float *bp = {src.b} + n0;")
            b_k = src.b_k
        row_len = n if into_row else 0
        if nr <= SCALAR_NR or wide_tile is None:  # one tile (the board's scalar one, or MR)
            _tiles(w, src, out, rows, mr, (wide, k, b_k, row_len, width), add)
        else:  # the ISA's wider tile where its condition holds, else MR rows
            w(f"#if {wide_tile[1]}")
            _tiles(w, src, out, rows, wide_tile[0], (wide, k, b_k, row_len, width), add)
            w("#else")
            _tiles(w, src, out, rows, mr, (wide, k, b_k, row_len, width), add)
            w("#endif")


def _tiles(w: CWriter, src: Operands, out: Output, rows: int, mr: int,
           shape: tuple[int, int, int, int, int], add: AddRows | None = None) -> None:
    """The block's ``rows`` in tiles of ``mr`` rows, then one tile of the rest, all on the panel
    at n0; ``shape``: ``_tile``'s (nr, k, b_k, row_len, store)."""
    nr, k, b_k, row_len, store = shape
    for height in block_loops(w, rows, mr, "t", "m0", "m1 + "):
        _tile(w, src, out, height, nr, k, b_k, row_len, max(1, mr // height), store, add)


def _tile(w: CWriter, src: Operands, out: Output, mr: int, nr: int, k: int, b_k: int,
          row_len: int, split: int = 1, store: int | None = None,
          add: AddRows | None = None) -> None:
    """One MR x NR tile at (m0, n0): accumulate over k, then epilogue and store row by row.
    ``row_len``: rows go to the block's stack buffer ``orows`` (rows of that many floats);
    ``split``: independent partial sums per row (``_vector_sums``); ``store``: the columns kept
    (fewer than NR for a padded last panel, whose other sums are zeros)."""
    store = nr if store is None else store
    rows = range(mr)
    w(f"const float *ar = {src.a} + {offset_expr(['m0'], [src.a_m])};")
    if nr <= SCALAR_NR:
        _scalar_sums(w, src, mr, nr, k, b_k)
    else:
        _vector_sums(w, src, mr, nr, k, b_k, split, add)
    vs = [o.strides for o in out.chain.operands]
    for r in rows:
        mrow = f"m0 + {r}" if r else "m0"
        _scale_bias(w, out, f"c{r}", mrow, store)
        if row_len:
            dst = lambda i, r=r: f"orows[(m0 - m1 + {r})*{row_len} + n0 + {i}]"  # noqa: E731
        else:
            dst = lambda i, mrow=mrow: f"{out.y}[{out.y_row(mrow)} + n0 + {i}]"  # noqa: E731
        emit_apply(w, out.chain, vs, [*out.batch, mrow, "n0"], store,
                   lambda i, r=r: f"c{r}[{i}]", dst)


def _vector_sums(w: CWriter, src: Operands, mr: int, nr: int, k: int, b_k: int,
                 split: int, add: AddRows | None = None) -> None:
    """``c{r}[j] = sum_kk A[m0+r, kk] * B[kk, n0+j]`` with the loop over j vectorized. A tile
    of fewer rows than MR (a last tile, or a Gemm of one row) would wait on one chain of
    dependent FMAs per vector: it keeps ``split`` partial sums over interleaved k instead, so as
    many independent chains are in flight as in a full tile, added up at the end (by the ISA's
    ``add``, ``IsaKernels.add_rows``, where it has one)."""
    rows = range(mr)
    part = [[f"c{r}" if p == 0 else f"c{r}_{p}" for p in range(split)] for r in rows]
    for x in (x for row in part for x in row):  # one per line: stack_scratch_bytes counts them
        w(f"float {x}[{nr}];")
    w(f"for (int j = 0; j < {nr}; ++j) {{ {' '.join(f'{x}[j] = 0.0f;' for row in part for x in row)} }}")
    whole = k // split * split
    step = "++kk" if split == 1 else f"kk += {split}"
    w.open(f"for (int kk = 0; kk < {whole}; {step})")
    body = []
    for p in range(split):
        kk = "kk" if p == 0 else f"(kk + {p})"
        w(f"const float *br{p} = bp + {offset_expr([kk], [b_k])};")
        for r in rows:
            w(f"const float a{r}_{p} = ar[{offset_expr([str(r), kk], [src.a_m, src.a_k])}];")
            body.append(f"{part[r][p]}[j] += a{r}_{p} * br{p}[j];")
    w(f"for (int j = 0; j < {nr}; ++j) {{ {' '.join(body)} }}")
    w.close()
    if whole < k:  # the last k % split terms, into the first partial sum
        w.open(f"for (int kk = {whole}; kk < {k}; ++kk)")
        w(f"const float *br = bp + {offset_expr(['kk'], [b_k])};")
        for r in rows:
            w(f"const float a{r} = ar[{offset_expr([str(r), 'kk'], [src.a_m, src.a_k])}];")
        w(f"for (int j = 0; j < {nr}; ++j) {{ {' '.join(f'c{r}[j] += a{r} * br[j];' for r in rows)} }}")
        w.close()
    if split > 1 and add is not None and all(add(w, row[0], row[1:], nr) for row in part):
        return
    if split > 1:
        w(f"for (int j = 0; j < {nr}; ++j) {{ "
          + " ".join(f"{row[0]}[j] += {' + '.join(f'{x}[j]' for x in row[1:])};" for row in part)
          + " }")


def _scalar_sums(w: CWriter, src: Operands, mr: int, nr: int, k: int, b_k: int) -> None:
    """The tile's sums as named scalars, the loop over its few columns unrolled in the text: a
    scalar FPU's build (-O2) keeps them in registers, where ``c0[j]`` loops went through memory
    on every multiply-add. The rows are then copied into ``c{r}[nr]`` for the epilogue."""
    names = [[f"s{r}_{j}" for j in range(nr)] for r in range(mr)]
    w(f"float {', '.join(f'{x} = 0.0f' for row in names for x in row)};")
    w.open(f"for (int kk = 0; kk < {k}; ++kk)")
    w(f"const float *br = bp + {offset_expr(['kk'], [b_k])};")
    w(f"const float {', '.join(f'b{j} = br[{j}]' for j in range(nr))};")
    for r in range(mr):
        a = f"ar[{offset_expr([str(r), 'kk'], [src.a_m, src.a_k])}]"
        w(f"{{ const float a = {a}; {' '.join(f'{x} += a * b{j};' for j, x in enumerate(names[r]))} }}")
    w.close()
    for r in range(mr):
        w(f"float c{r}[{nr}] = {{{', '.join(names[r])}}};")


def _scale_bias(w: CWriter, out: Output, acc: str, mrow: str, nr: int) -> None:
    """A Gemm's alpha (runtime B), a row's own factor and beta * C on one row of the tile."""
    for factor in (out.scale, out.row_scale(mrow) if out.row_scale else None):
        if factor is not None:
            w(f"for (int j = 0; j < {nr}; ++j) {acc}[j] *= {factor};")
    if out.bias is not None:
        ptr, st, beta = out.bias
        cj = "0" if st[1] == 0 else "j"
        mul = "" if beta == 1.0 else f"{flit(beta)} * "
        w(f"for (int j = 0; j < {nr}; ++j) "
          f"{acc}[j] += {mul}({ptr} + {offset_expr([mrow, 'n0'], st)})[{cj}];")
