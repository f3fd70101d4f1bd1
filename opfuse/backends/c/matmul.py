"""Gemm and (batched, broadcasting) MatMul kernels, epilogue fused.

``Y[.., m, n] = sum_k A[.., m, k] * B[.., k, n]``. A constant B (transposed for Gemm's transB=1,
alpha folded in) and a runtime B with contiguous columns run the register-blocked core of
``matmul_tile.py`` (B packed into panels at generation time, or read in place), as one GEMM over
all batch rows when B is shared by the batch and A's rows are evenly strided. A runtime B with
strided columns (a transposed view, a Gemm's runtime transB) runs the core through a stack panel
when k * NR fits ``PANEL_FLOATS``; otherwise a MatMul view is packed per tile (``matmul_view.py``)
and the rest keeps the row kernel here: for each row m, an accumulator of NB output columns on the
stack updated with
``a[m,k] * B[k, n0:n0+NB]``, a contiguous inner loop gcc vectorizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import (
    CWriter,
    attr,
    bcast_strides,
    block_loops,
    contiguous,
    dims,
    flit,
    merge,
    offset_expr,
    who,
)
from opfuse.backends.c.epilogue import Chain, Operand, build_chain, emit_apply
from opfuse.backends.c.matmul_tile import (
    PANEL_FLOATS,
    Operands,
    Output,
    emit_core,
    pack_panels,
    pads_tail,
    tile_shape,
)
from opfuse.backends.c.matmul_view import broadcast_view, packed_rows, view_strides
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const

NB = 256  # output columns per accumulator tile


# Called after each output row m is stored with the row's element offset (a norm of the row).
RowHook = Callable[[CWriter, str], None]
ROW_BUFFER = "orow"  # with ``into_row``: the row is stored here (n floats), not in the output


def emit_gemm(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
              after_row: RowHook | None = None, into_row: bool = False) -> None:
    a_v, b_v = node.inputs[0], node.inputs[1]
    c_v = node.inputs[2] if len(node.inputs) > 2 else None
    a_shape, b_shape = dims(a_v, node), dims(b_v, node)
    ta, tb = int(attr(node, "transA", 0)), int(attr(node, "transB", 0))
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    m, k = (a_shape[1], a_shape[0]) if ta else a_shape
    n = b_shape[0] if tb else b_shape[1]
    a = params.inp(a_v, node)
    a_st = (1, m) if ta else (k, 1)  # strides of (m, k)
    b_arr = const(b_v)
    packed = b_arr is not None
    pad = packed and pads_tail(n, params.store.isa)
    if packed:
        kn = (b_arr.T if tb else b_arr).astype(np.float32) * np.float32(alpha)
        nr = tile_shape(params.store.isa)[1]
        b = params.weight(f"{b_v.name}:panels{nr}:{pad}:{alpha}:{tb}", pack_panels(kn, nr, pad))
        b_st, scale = (n, 1), None
    else:
        b = params.inp(b_v, node)
        b_st, scale = ((1, k) if tb else (n, 1)), (flit(alpha) if alpha != 1.0 else None)
    bias = None
    if c_v is not None and beta != 0.0:
        bias = (params.inp(c_v, node), bcast_strides(dims(c_v, node), (m, n)), beta)
    shape = dims(node.outputs[0], node)
    chain = build_chain(pre, shape, params, node.outputs[0].name)
    # a runtime transB (strided columns) is copied panel by panel, as a transposed MatMul view
    if packed or b_st[1] == 1 or k * tile_shape(params.store.isa)[1] <= PANEL_FLOATS:
        y = params.out((pre or [node])[-1].outputs[0], node) if not into_row else ROW_BUFFER
        src = Operands(a, a_st[0], a_st[1], b, b_st[0], packed, 1 if packed else b_st[1], pad)
        out = Output(chain, (), y, lambda r: f"({r})*{n}", scale, bias)
        emit_core(w, src, out, m, n, k, params.store.isa, after_row,
                  lambda r: f"{r}*{n}", into_row)
        return
    y = ROW_BUFFER if into_row else params.out((pre or [node])[-1].outputs[0], node)
    w.open(f"for (int m = 0; m < {m}; ++m)")
    if into_row:
        w(f"float {ROW_BUFFER}[{n}];")
    _rows(w, chain, [], "m", n, k, f"{a} + m*{a_st[0]}", a_st[1], b, b_st, scale, bias, y, (m, n),
          into_row)
    if after_row is not None:
        after_row(w, f"m*{n}")
    w.close()


def _rows(w, chain, batch, mvar, n, k, a_row, a_k, b, b_st, scale, bias, y, mn,
          into_row: bool = False) -> None:
    """Tiles of one output row: ``acc[:] = sum_k a_row[k] * B[k, n0:]``, epilogue, one store."""
    tile = min(NB, n)
    ys = contiguous(chain.shape)
    row = "0" if into_row else offset_expr([*batch, mvar], ys[:-1])
    for width in block_loops(w, n, tile, "t", "n0"):
        w(f"float acc[{width}];")
        w(f"for (int i = 0; i < {width}; ++i) acc[i] = 0.0f;")
        w.open(f"for (int kk = 0; kk < {k}; ++kk)")
        w(f"const float av = ({a_row})[kk*{a_k}];")
        w(f"const float *br = {b} + kk*{b_st[0]} + n0*{b_st[1]};")
        bi = "i" if b_st[1] == 1 else f"i*{b_st[1]}"
        w(f"for (int i = 0; i < {width}; ++i) acc[i] += av * br[{bi}];")
        w.close()
        if scale is not None:
            w(f"for (int i = 0; i < {width}; ++i) acc[i] *= {scale};")
        if bias is not None:
            ptr, st, beta = bias
            ci = "0" if st[1] == 0 else "i"
            mul = "" if beta == 1.0 else f"{flit(beta)} * "
            w(f"for (int i = 0; i < {width}; ++i) "
              f"acc[i] += {mul}({ptr} + {offset_expr([mvar, 'n0'], st)})[{ci}];")
        vs = [o.strides for o in chain.operands]
        emit_apply(w, chain, vs, [*batch, mvar, "n0"], width, lambda i: f"acc[{i}]",
                   lambda i: f"{y}[{row} + n0 + {i}]")
    del mn


def emit_matmul(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
                after_row: RowHook | None = None, into_row: bool = False,
                view: ir.Node | None = None) -> None:
    """``view``: a Transpose producing one operand, read in place through strides
    (matmul_view.py)."""
    a_v, b_v = node.inputs[0], node.inputs[1]
    a_shape, b_shape = dims(a_v, node), dims(b_v, node)
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise OpfuseError(f"C backend: {who(node)}: MatMul of a scalar")
    a2 = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b2 = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    m, k = a2[-2], a2[-1]
    n = b2[-1]
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    shape = dims(node.outputs[0], node)
    if math.prod(shape) != math.prod(batch) * m * n:
        raise OpfuseError(f"C backend: {who(node)}: unexpected output shape {list(shape)}")
    full = (*batch, m, n)
    a_st = bcast_strides(a2, (*batch, m, k))
    b_st = bcast_strides(b2, (*batch, k, n))
    a, b = None, None
    if view is not None:  # the viewed operand is read in the Transpose's input
        vshape, vst = view_strides(view)
        if view.outputs[0] is a_v:
            a, a_st = params.inp(view.inputs[0], view), broadcast_view(vshape, vst, (*batch, m, k))
        else:
            b, b_st = params.inp(view.inputs[0], view), broadcast_view(vshape, vst, (*batch, k, n))
    a = a or params.inp(a_v, node)
    b_arr = const(b_v) if b is None and len(b_shape) <= 2 else None
    packed = b_arr is not None and b_arr.dtype == np.float32
    if packed:  # a Linear's weight: packed into the core's panels at generation time
        nr, pad = tile_shape(params.store.isa)[1], pads_tail(n, params.store.isa)
        b = params.weight(f"{b_v.name}:panels{nr}:{pad}", pack_panels(b_arr.reshape(k, n), nr, pad))
    b = b or params.inp(b_v, node)
    chain = build_chain(pre, shape, params, node.outputs[0].name)
    if shape != full:  # 1-D operands dropped a dim: view the chain on the full shape
        ops = []
        for o in chain.operands:
            src = o.strides
            ops.append(Operand(o.ptr, tuple(_restride(src, shape, full))))
        chain = Chain(full, chain.steps, ops)
    y = ROW_BUFFER if into_row else params.out((pre or [node])[-1].outputs[0], node)
    nr = tile_shape(params.store.isa)[1]
    on_core = packed or b_st[-1] == 1 or (b_st[-1] != 0 and k * nr <= PANEL_FLOATS)
    merged = _merged_rows(batch, m, a_st, b_st, chain) if on_core else None
    if merged is not None:  # one GEMM of M = prod(batch) * m rows over a shared B
        a_m, mchain = merged
        big_m = math.prod(batch) * m
        src = Operands(a, a_m, a_st[-1], b if packed else f"({b})", b_st[-2], packed, b_st[-1],
                       packed and pads_tail(n, params.store.isa))
        out = Output(mchain, (), y, lambda r: f"({r})*{n}")
        emit_core(w, src, out, big_m, n, k, params.store.isa, after_row,
                  lambda r: f"{r}*{n}", into_row)
        return
    coords = []
    for d, size in enumerate(batch):
        w.open(f"for (int b{d} = 0; b{d} < {size}; ++b{d})")
        coords.append(f"b{d}")
    a_row = f"{a} + " + offset_expr([*coords, "m"], a_st[:-1])
    b_base = f"{b} + " + offset_expr(coords, b_st[:-2]) if coords else b
    if on_core:
        ys = contiguous(full)[:-1]  # the register-blocked core (matmul_tile.py)
        src = Operands(f"({a} + {offset_expr(coords, a_st[:-2])})", a_st[-2], a_st[-1],
                       b if packed else f"({b_base})", b_st[-2], packed, b_st[-1],
                       packed and pads_tail(n, params.store.isa))
        out = Output(chain, tuple(coords), y, lambda r: offset_expr([*coords, r], ys))
        emit_core(w, src, out, m, n, k, params.store.isa, after_row,
                  lambda r: offset_expr([*coords, r], ys), into_row)
    elif view is not None and b_st[-1] != 1 and n > 1:  # a transposed B: packed tiles
        packed_rows(w, chain, coords, m, n, k, a_row, a_st[-1], f"({b_base})",
                    (b_st[-2], b_st[-1]), y)
    else:
        w.open(f"for (int m = 0; m < {m}; ++m)")
        if into_row:
            w(f"float {ROW_BUFFER}[{n}];")
        _rows(w, chain, coords, "m", n, k, a_row, a_st[-1], f"({b_base})",
              (b_st[-2], b_st[-1]), None, None, y, (m, n), into_row)
        if after_row is not None:
            after_row(w, offset_expr([*coords, "m"], contiguous(full)[:-1]))
        w.close()
    for _ in batch:
        w.close()


def _merged_rows(batch: tuple[int, ...], m: int, a_st: list[int], b_st: list[int],
                 chain: Chain) -> tuple[int, Chain] | None:
    """A's row stride and the chain on ``(M, n)`` when the batch dims fold into M, else None.

    They fold when B is the same matrix for every batch coordinate (zero batch strides: a
    Linear's weight), A's batch and m dims are one evenly strided run of rows (a contiguous
    ``[1, 56, 56, 40]`` activation), B's n dim can be read by the core (contiguous or packed
    once per block), and every epilogue operand is indexed the same way on the merged rows (a
    per-column bias, a contiguous residual). docs/architecture.md, "The float MatMul/Gemm core"."""
    if not batch or any(s != 0 for s in b_st[:-2]):
        return None
    rows = (*batch, m)
    groups = [list(range(len(rows))), [len(rows)]]
    a_m = merge(rows, groups[:1], a_st[:-1])
    ops = chain.view(groups)
    if a_m is None or ops is None:
        return None
    big = (math.prod(rows), chain.shape[-1])
    return a_m[0], Chain(big, chain.steps, [Operand(o.ptr, s) for o, s in zip(chain.operands, ops,
                                                                             strict=True)])


def _restride(strides, shape, full) -> list[int]:
    """Strides on ``shape`` re-expressed on ``full`` (same elements, size-1 dims inserted)."""
    out, j = [], 0
    for size in full:
        if j < len(shape) and shape[j] == size:
            out.append(strides[j])
            j += 1
        else:
            out.append(0)
    return out
