"""A MatMul operand read through a Transpose as a strided view (``opfuse/fusion/views.py``), and
the dot-product row kernel for a right operand whose k dim is contiguous.

``T = Transpose(X, perm)`` has ``T.shape[d] = X.shape[perm[d]]`` and, read in place in X,
``stride_T[d] = stride_X[perm[d]]``; broadcasting T's batch dims adds zero strides as usual.

``_rows`` in matmul.py keeps a tile of output columns and streams rows of B, fast when B's n dim
is contiguous. A transposed B (attention's ``Q @ K^T``: B[k, n] = K[n, k]) has its k dim
contiguous instead, so each output is a dot product of two contiguous runs, summed with 8
partial sums so gcc vectorizes it without -ffast-math.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, contiguous, dims, offset_expr
from opfuse.backends.c.epilogue import Chain, emit_apply

NB = 64  # output columns per tile of the dot-product kernel


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


def rows_nt(w: CWriter, chain: Chain, batch: list[str], n: int, k: int, a_row: str, a_k: int,
            b: str, b_n: int, y: str) -> None:
    """Row ``m`` of ``Y = A @ B`` with B's k stride 1 and n stride ``b_n``: dot products, then
    the epilogue chain and one store per tile."""
    ys = contiguous(chain.shape)
    row = offset_expr([*batch, "m"], ys[:-1])
    tile = min(NB, n)
    full, rem = divmod(n, tile)
    ak = "" if a_k == 1 else f"*{a_k}"
    for width, count, start in ((tile, full, 0), (rem, 1 if rem else 0, full * tile)):
        if count == 0:
            continue
        w.open(f"for (int t = 0; t < {count}; ++t)" if count > 1 else "")
        w(f"const int n0 = {start} + {'t*' + str(tile) if count > 1 else '0'};")
        w(f"float acc[{width}];")
        w.open(f"for (int i = 0; i < {width}; ++i)")
        w(f"const float *ar = {a_row};")
        w(f"const float *bc = {b} + (n0 + i)*{b_n};")
        w("float s8[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};")
        w(f"for (int kk = 0; kk + 8 <= {k}; kk += 8) for (int l = 0; l < 8; ++l) "
          f"s8[l] += ar[(kk + l){ak}] * bc[kk + l];")
        w("float s = ((s8[0] + s8[1]) + (s8[2] + s8[3])) + ((s8[4] + s8[5]) + (s8[6] + s8[7]));")
        if k % 8:
            w(f"for (int kk = {k - k % 8}; kk < {k}; ++kk) s += ar[kk{ak}] * bc[kk];")
        w("acc[i] = s;")
        w.close()
        vs = [o.strides for o in chain.operands]
        emit_apply(w, chain, vs, [*batch, "m", "n0"], width, lambda i: f"acc[{i}]",
                   lambda i: f"{y}[{row} + n0 + {i}]")
        w.close()
