"""The float attention kernel: scores, scale/mask, softmax and weighted sum, a block of query rows at
a time on the register-blocked MatMul core.

For each batch coordinate (batch and heads, as the export gives them) and each block of
``block_rows`` query rows q0.. (docs/architecture.md, "Attention"; the pattern and the block size
are ``opfuse/fusion/attention.py``)::

    S[r, :] = Q[q0 + r, :] . Kt                  the block's scores, into the scratch rows
    S[r, j] = S[r, j] op x[q0 + r, j]            each score op, in graph order (a scalar: a literal)
    E[r, j] = exp(S[r, j] - max(S[r]))           the softmax's exponentials in place, s_r their sum
    O[q0 + r, :] = (E[r, :] . V) * (1 / s_r)     the block's output rows, normalised in the store

Both products are ``matmul_tile.emit_core`` (MR x NR register tiles) on pointers and strides: Q's
block and K read where they are (an absorbed Transpose permutes its input's strides, a broadcast
batch or mask dim has stride 0). A Kt with strided keys (K as the exporter stored it) is packed
on the host into the core's panels once per head (``pack_head``, into the plan's second ring
``ring:<Kt>``); on a board the core copies it panel by panel into its stack panel once per block.
A Kt or V whose strided panel would not fit ``PANEL_FLOATS`` is multiplied in plain loops. A
block is up to 64 rows on the host, so each panel of K and V feeds that many rows from cache; 4
(the board tile's MR) on an MCU board, whose arena is the budget. The scratch rows are the plan's
ring buffer ``ring:<scores>`` (``OPFUSE_ARENA_BYTES`` counts it); the softmax is
``norms.softmax_row`` (vectorized loops, the branch-free exp of ``fastmath.py``). Its 1 / s_r
scales the D columns of O's row in the core's store (``Output.row_scale``) rather than the N
scores, one pass over the scores fewer (Whisper's N = 1500, D = 64).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, block_loops, const, contiguous, dims, flit, offset_expr
from opfuse.backends.c.epilogue import Chain
from opfuse.backends.c.matmul_tile import (
    PANEL_FLOATS,
    Operands,
    Output,
    emit_core,
    panel_strides,
    tile_shape,
)
from opfuse.backends.c.norms import softmax_row, sum8  # row reductions
from opfuse.backends.c.tensors import Params
from opfuse.fusion.attention import Core, block_rows, perm_of
from opfuse.memory.lifetimes import RING_PREFIX
from opfuse.targets.isa import Isa

C_OPS = {"Mul": "*", "Div": "/", "Add": "+", "Sub": "-"}


def why_not_attention(core: Core) -> str | None:
    """None when this module writes ``core``; else why not, in one phrase."""
    for node in core.scores:
        if node.op_type not in C_OPS:
            return f"its attention kernel applies Add, Sub, Mul or Div to the scores, not {node.op_type}"
    for node in core.nodes:
        for value in (*node.inputs, *node.outputs):
            if value is not None and value.dtype != ir.DataType.FLOAT:
                name = value.dtype.name if value.dtype is not None else "unknown"
                return f"its attention kernel is float32 only ('{value.name}' is {name})"
    return None


def _strides(value: ir.Value, core: Core, node: ir.Node) -> tuple[ir.Value, list[int]]:
    """The tensor read for ``value`` and the element strides of ``value``'s dims in it."""
    src, perm = core.source(value)
    own = contiguous(dims(src, node))
    if perm is None:
        return src, own
    return src, [own[p] for p in perm]


def _onto(shape: Sequence[int], strides: Sequence[int], out: Sequence[int]) -> list[int]:
    """``strides`` of a tensor of ``shape`` broadcast onto ``out`` (numpy rules: stride 0)."""
    pad = len(out) - len(shape)
    full_shape = [1] * pad + list(shape)
    full = [0] * pad + list(strides)
    return [0 if s == 1 and o != 1 else st for s, o, st in zip(full_shape, out, full, strict=True)]


def emit_attention(w: CWriter, core: Core, params: Params) -> None:
    """The body of one attention kernel (module docstring)."""
    qk, pv = core.qk, core.pv
    out = dims(pv.outputs[0], pv)
    batch, m, dv = out[:-2], out[-2], out[-1]
    d, n = dims(qk.inputs[0], qk)[-1], dims(core.score_value, qk)[-1]
    full = lambda last: (*batch, m, last)  # noqa: E731
    ptrs, st = {}, {}
    for key, value, node, shape in (("q", qk.inputs[0], qk, full(d)), ("k", qk.inputs[1], qk,
                                    (*batch, d, n)), ("v", pv.inputs[1], pv, (*batch, n, dv))):
        src, strides = _strides(value, core, node)
        ptrs[key] = params.inp(src, node)
        st[key] = _onto(dims(value, node), strides, shape)
    offset = params.store.plan.offsets[RING_PREFIX + core.score_value.name] // 4
    row = params._add("ring:" + core.score_value.name, f"float *{params.restrict} {{name}}",
                      f"A + {offset}")
    y = params.out(core.output, core.out_transpose or pv)
    ys = _out_strides(core, out)
    coords = []
    for i, size in enumerate(batch):  # h: b0.. are the board tile's names for B's values
        w.open(f"for (int h{i} = 0; h{i} < {size}; ++h{i})")
        coords.append(f"h{i}")
    q, k, v = ptrs["q"], ptrs["k"], ptrs["v"]
    qs, ks, vs = st["q"], st["k"], st["v"]
    w(f"const float *kb = {k} + {offset_expr(coords, ks[:-2])};")
    w(f"const float *vb = {v} + {offset_expr(coords, vs[:-2])};")
    isa = params.store.isa
    kt_src = Operands("qb", qs[-2], qs[-1], "kb", ks[-2], False, ks[-1])
    packed = params.store.plan.offsets.get(RING_PREFIX + qk.inputs[1].name)
    if packed is not None:  # fusion/attention.py:scratch_rings planned a head of Kt for panels
        kp = params._add("ring:" + qk.inputs[1].name, f"float *{params.restrict} {{name}}",
                         f"A + {packed // 4}")
        pack_head(w, kp, ks[-2], ks[-1], d, n, tile_shape(isa)[1])
        kt_src = Operands("qb", qs[-2], qs[-1], kp, 0, True)
    # each block size its own loop: the MatMul core takes constant sizes
    for rows in block_loops(w, m, block_rows(core, isa.scalar), "blk", "q0"):
        w(f"const float *qb = {q} + {offset_expr([*coords, 'q0'], qs[:-1])};")
        w(f"float *yb = {y} + {offset_expr([*coords, 'q0'], ys[:-1])};")
        _product(w, kt_src, row,
                 lambda r: f"({r})*{n}", (rows, n, d), isa)
        w(f"float inv[{rows}];")
        w.open(f"for (int r = 0; r < {rows}; ++r)")
        w(f"float *sr = {row} + r*{n};")
        for node in core.scores:
            _score_op(w, node, core, "sr", n, params, [*coords, "q0 + r"], full(n))
        total = softmax_row(w, "sr", "sr", n, lanes=isa.softmax_lanes)
        w(f"inv[r] = 1.0f / {total};")
        w.close()
        _product(w, Operands(row, n, 1, "vb", vs[-2], False, vs[-1]), "yb",
                 lambda r: offset_expr([r], ys[-2:-1]), (rows, dv, n), isa, "inv")
    for _ in batch:
        w.close()


def pack_head(w: CWriter, kp: str, kd: int, kn: int, d: int, n: int, nr: int) -> None:
    """One head of Kt (``kb``, keys strided by ``kn``) into ``kp`` as the MatMul core's panels
    (the layout of ``matmul_tile.pack_panels``, from its ``panel_strides``), key by key so K's
    rows are read contiguously where it is stored (N, D)."""
    for width in block_loops(w, n, nr, "p", "n0"):
        at = offset_expr(["n0", "dd", "j"], panel_strides(d, width))
        w(f"for (int j = 0; j < {width}; ++j) for (int dd = 0; dd < {d}; ++dd) "
          f"{kp}[{at}] = kb[{offset_expr(['dd', '(n0 + j)'], [kd, kn])}];")


def _product(w: CWriter, src: Operands, y: str, y_row: Callable[[str], str],
             mnk: tuple[int, int, int], isa: Isa, row_scale: str | None = None) -> None:
    """``y[y_row(m) + j] = sum_kk A[m, kk] * B[kk, j]`` (times ``row_scale[m]``): the
    register-blocked MatMul core, or, for a B whose strided columns would not fit the core's
    stack panel, plain loops."""
    m, n, k = mnk
    nr = tile_shape(isa)[1]
    factor = (lambda r: f"{row_scale}[{r}]") if row_scale else None  # noqa: E731
    if src.b_n == 1 or (src.b_n != 0 and k * nr <= PANEL_FLOATS):
        emit_core(w, src, Output(Chain((m, n)), (), y, y_row, row_scale=factor), m, n, k, isa)
        return
    w.open(f"for (int mi = 0; mi < {m}; ++mi) for (int nj = 0; nj < {n}; ++nj)")
    sum8(w, "s", k, f"{src.a}[{offset_expr(['mi', '@'], [src.a_m, src.a_k])}] * "
         f"{src.b}[{offset_expr(['@', 'nj'], [src.b_k, src.b_n])}]")
    w(f"{y}[{y_row('mi')} + nj] = {'s * ' + factor('mi') if factor else 's'};")
    w.close()


def _out_strides(core: Core, out: Sequence[int]) -> list[int]:
    """Element strides of O's dims where the kernel writes them: O itself, or the output of its
    absorbed Transpose, in which O's dim ``perm[i]`` is axis i (the last stays last: stride 1)."""
    if core.out_transpose is None:
        return contiguous(out)
    perm = perm_of(core.out_transpose)
    stored = contiguous([out[p] for p in perm])
    strides = [0] * len(out)
    for axis, dim in enumerate(perm):
        strides[dim] = stored[axis]
    return strides


def _score_op(w: CWriter, node: ir.Node, core: Core, row: str, n: int, params: Params,
              coords: list[str], shape: tuple[int, ...]) -> None:
    """``row[j] = row[j] op x``, the scores being the op's first operand for Sub and Div."""
    carried = _carried(node, core)
    other = next(v for v in node.inputs if v is not carried)
    arr = const(other)
    if arr is not None and arr.size == 1:
        x = flit(float(arr.reshape(-1)[0]))
    else:
        ptr = params.inp(other, node)
        xs = _onto(dims(other, node), contiguous(dims(other, node)), shape)
        base = offset_expr(coords, xs[:-1])
        x = f"{ptr}[{base} + {offset_expr(['j'], xs[-1:])}]"
    sym = C_OPS[node.op_type]
    left, right = (f"{row}[j]", x) if node.inputs[0] is carried else (x, f"{row}[j]")
    w(f"for (int j = 0; j < {n}; ++j) {row}[j] = {left} {sym} {right};")


def _carried(node: ir.Node, core: Core) -> ir.Value:
    """The input of a score op that holds the scores (the output of the core node before it)."""
    chain = [core.qk, *core.scores]
    at = next(i for i, n in enumerate(chain) if n is node)
    return chain[at - 1].outputs[0]
