"""A MatMul operand read through a Transpose as a strided view (``opfuse/fusion/views.py``), and
the dot-product row kernel for a right operand whose k dim is contiguous.

``T = Transpose(X, perm)`` has ``T.shape[d] = X.shape[perm[d]]`` and, read in place in X,
``stride_T[d] = stride_X[perm[d]]``; broadcasting T's batch dims adds zero strides as usual.

``_rows`` in matmul.py keeps a tile of output columns and streams rows of B, fast when B's n dim
is contiguous. A transposed B (attention's ``Q @ K^T``: B[k, n] = K[n, k]) has a strided n dim
instead: a tile of its columns is copied once per batch into a contiguous stack tile (at most
``PACK_FLOATS``), then every row of A runs the same vectorized multiply-accumulate over it, so the
copy is amortized over the rows and the transposed tensor never reaches the arena. (Dot products
over the contiguous k dim were measured slower: one horizontal sum per output.)
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, block_loops, contiguous, dims, offset_expr
from opfuse.backends.c.epilogue import Chain, emit_apply

PACK_FLOATS = 4096  # a packed tile of B: at most 16 KB of stack (OPFUSE_STACK_SCRATCH_BYTES)


def view_strides(view: ir.Node) -> tuple[tuple[int, ...], list[int]]:
    """Shape of the Transpose's output and its strides read in place in the Transpose's input."""
    xs = dims(view.inputs[0], view)
    perm = attr(view, "perm") or list(range(len(xs)))[::-1]
    st = contiguous(xs)
    return tuple(xs[p] for p in perm), [st[p] for p in perm]


def broadcast_view(shape: Sequence[int], strides: Sequence[int], out: Sequence[int]) -> list[int]:
    """Strides of a strided operand broadcast (numpy rules) to ``out``."""
    pad = len(out) - len(shape)
    full, fst = [1] * pad + list(shape), [0] * pad + list(strides)
    return [0 if s == 1 and o != 1 else st for s, st, o in zip(full, fst, out, strict=True)]


def packed_rows(w: CWriter, chain: Chain, batch: list[str], m: int, n: int, k: int,
                a_row: str, a_k: int, b: str, b_st: tuple[int, int], y: str) -> None:
    """All rows of one batch of ``Y = A @ B`` with B read through strides ``b_st`` (k, n): each
    tile of ``width`` columns of B is copied once into a contiguous stack tile, then every row
    ``m`` runs the contiguous multiply-accumulate over it, the epilogue and one store."""
    ys = contiguous(chain.shape)
    row = offset_expr([*batch, "m"], ys[:-1])
    tile = max(1, min(n, PACK_FLOATS // max(k, 1)))
    for width in block_loops(w, n, tile, "t", "n0"):
        w(f"float bt[{k * width}];")
        w(f"for (int kk = 0; kk < {k}; ++kk) for (int i = 0; i < {width}; ++i) "
          f"bt[kk*{width} + i] = {b}[kk*{b_st[0]} + (n0 + i)*{b_st[1]}];")
        w.open(f"for (int m = 0; m < {m}; ++m)")
        w(f"float acc[{width}];")
        w(f"for (int i = 0; i < {width}; ++i) acc[i] = 0.0f;")
        w.open(f"for (int kk = 0; kk < {k}; ++kk)")
        w(f"const float av = ({a_row})[kk*{a_k}];")
        w(f"for (int i = 0; i < {width}; ++i) acc[i] += av * bt[kk*{width} + i];")
        w.close()
        vs = [o.strides for o in chain.operands]
        emit_apply(w, chain, vs, [*batch, "m", "n0"], width, lambda i: f"acc[{i}]",
                   lambda i: f"{y}[{row} + n0 + {i}]")
        w.close()
