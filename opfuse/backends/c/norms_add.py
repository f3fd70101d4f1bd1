"""Row normalisations over the last axis: RMSNormalization, and Add + LayerNorm / RMSNorm that
also stores the sum (docs/architecture.md, "Transformer fusions"; the fusion is
``fusion/transformer.py``).

Per row ``r`` of ``n`` elements (the last axis):

    RMSNorm:    y_r = x_r / sqrt(sum(x_r^2) / n + eps) * scale
    LayerNorm:  y_r = (x_r - mu) / sqrt(sum((x_r - mu)^2) / n + eps) * scale + bias,
                mu = sum(x_r) / n   (two passes, as ``norms.emit_layernorm``)
    with sum:   s_r = a_r + b_r (or any elementwise chain: BERT's embedding sums) is computed
                into the row, stored when the next residual reads it (a second kernel output) or
                kept in a stack row of n floats when not, then normalised as x_r = s_r while the
                row is still in cache: s is written once and never read back by a second kernel.

The sums use ``norms.sum8`` (8 partial sums, vectorisable without -ffast-math).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, bcast_strides, const, dims, flit, merge, who
from opfuse.backends.c.epilogue import EPILOGUE_OPS, build_chain, emit_apply
from opfuse.backends.c.matmul import ROW_BUFFER
from opfuse.backends.c.norms import sum8
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ops import groups

NORMS = groups.ROW_NORMS


def is_add_norm(members: Sequence[ir.Node]) -> bool:
    """An elementwise chain (the residual ``Add``, or BERT's embedding sums) then a
    LayerNormalization / RMSNormalization reading the chain's result."""
    if len(members) < 2 or members[-1].op_type not in NORMS:
        return False
    chain, norm = members[:-1], members[-1]
    return (
        all(m.domain in ("", "ai.onnx") for m in members)
        and all(m.op_type in EPILOGUE_OPS for m in chain)
        and norm.inputs[0] is chain[-1].outputs[0]
    )


def why_not_add_norm(members: Sequence[ir.Node]) -> str | None:
    """None when ``emit_add_norm`` writes this kernel, else why not (``support.py``)."""
    norm = members[-1]
    shape = norm.inputs[0].shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None  # sizes nobody knows: the emitter says so
    rank = len(shape)
    if rank < 2 or int(attr(norm, "axis", -1)) % rank != rank - 1:
        return f"a {norm.op_type} over more than the last axis after an elementwise op"
    if members[0].op_type in EPILOGUE_OPS:
        return _why_not_rows(members[:-1], tuple(shape))
    return None


def _why_not_rows(chain: Sequence[ir.Node], shape: tuple[int, ...]) -> str | None:
    """Every operand of the chain is read row by row: it broadcasts to ``shape`` and its strides
    merge over the leading dims (the view ``emit_add_norm`` runs the chain on)."""
    groups = [list(range(len(shape) - 1)), [len(shape) - 1]]
    for node in chain:
        for value in node.inputs:
            arr = const(value) if value is not None else None
            if value is None or (arr is not None and arr.size == 1):
                continue
            vshape = value.shape
            if vshape is None or not all(isinstance(d, int) for d in vshape):
                return None  # sizes nobody knows: the emitter says so
            try:
                strides = bcast_strides(tuple(vshape), shape)
            except ValueError:
                return f"{node.op_type}'s operand '{value.name}' does not broadcast to the sum"
            if merge(shape, groups, strides) is None:
                return f"{node.op_type}'s operand '{value.name}' is not read row by row"
    return None


def _row_operands(node: ir.Node, params: Params, n: int) -> list[str | None]:
    """``scale`` and (LayerNorm) ``bias`` as per-element expressions of ``i``."""
    found: list[str | None] = []
    count = 3 if node.op_type == "LayerNormalization" else 2
    for i in range(1, count):
        value = node.inputs[i] if len(node.inputs) > i else None
        if value is None:
            found.append(None)
            continue
        size = math.prod(dims(value, node))
        if size not in (1, n):
            raise OpfuseError(f"C backend: {who(node)}: scale/bias must cover the normalized dims")
        ptr = params.inp(value, node)
        found.append(f"{ptr}[0]" if size == 1 else f"{ptr}[i]")
    return found


def _check_outputs(node: ir.Node) -> None:
    for extra in node.outputs[1:]:
        if extra is not None and extra.name and (extra.consumers() or extra.is_graph_output()):
            raise OpfuseError(f"C backend: {who(node)}: its Mean/InvStdDev outputs are not emitted")


def _normalise_row(w: CWriter, node: ir.Node, params: Params, n: int) -> None:
    """``yr[i]`` from ``xr[i]``, i < n (both pointers declared by the caller)."""
    ops = _row_operands(node, params, n)
    eps = flit(attr(node, "epsilon", 1e-5))
    scale = f" * {ops[0]}" if ops[0] else ""
    w.open("")
    if node.op_type == "RMSNormalization":
        sum8(w, "sq", n, "xr[@] * xr[@]")
        w(f"const float rstd = 1.0f / sqrtf(sq * {flit(1.0 / n)} + {eps});")
        w(f"for (int i = 0; i < {n}; ++i) yr[i] = xr[i] * rstd{scale};")
        w.close()
        return
    sum8(w, "sum", n, "xr[@]")
    w(f"const float mean = sum * {flit(1.0 / n)};")
    w.open("")
    sum8(w, "sq", n, "(xr[@] - mean) * (xr[@] - mean)")
    w(f"const float rstd = 1.0f / sqrtf(sq * {flit(1.0 / n)} + {eps});")
    bias = f" + {ops[1]}" if len(ops) > 1 and ops[1] else ""
    w(f"for (int i = 0; i < {n}; ++i) yr[i] = (xr[i] - mean) * rstd{scale}{bias};")
    w.close()
    w.close()


def _rows(node: ir.Node) -> tuple[int, int]:
    xs = dims(node.inputs[0], node)
    axis = int(attr(node, "axis", -1)) % len(xs)
    return math.prod(xs[:axis]), math.prod(xs[axis:])


def emit_rmsnorm(w: CWriter, node: ir.Node, params: Params) -> None:
    """One RMSNormalization (opset 23: normalised over the dims from ``axis`` on)."""
    _check_outputs(node)
    outer, n = _rows(node)
    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    w.open(f"for (int o = 0; o < {outer}; ++o)")
    w(f"const float *xr = {x} + o*{n};")
    w(f"float *yr = {y} + o*{n};")
    _normalise_row(w, node, params, n)
    w.close()


def emit_add_norm(w: CWriter, members: list[ir.Node], params: Params) -> None:
    """s = chain(a, b, ...) row by row, stored when read outside the kernel, then y = norm(s)."""
    chain_nodes, norm = members[:-1], members[-1]
    why = why_not_add_norm(members)
    if why is not None:
        raise OpfuseError(f"C backend: {who(norm)}: {why}")
    _check_outputs(norm)
    outer, n = _rows(norm)
    s_value = norm.inputs[0]
    shape = dims(s_value, norm)
    chain = build_chain(chain_nodes, shape, params, None, exact=False)
    vstrides = chain.view([list(range(len(shape) - 1)), [len(shape) - 1]])
    if vstrides is None:
        raise OpfuseError(f"C backend: {who(norm)}: an operand does not broadcast by rows")
    stored = s_value.is_graph_output() or any(r is not norm for r in s_value.consumers())
    y = params.out(norm.outputs[0], norm)
    s = params.out(s_value, chain_nodes[-1]) if stored else None
    w.open(f"for (int o = 0; o < {outer}; ++o)")
    if s is None:
        w(f"float xr[{n}];")  # the sum lives in this row only
    else:
        w(f"float *xr = {s} + o*{n};")  # the second output
    emit_apply(w, chain, vstrides, ["o", "0"], n, None, lambda i: f"xr[{i}]")
    w(f"float *yr = {y} + o*{n};")
    _normalise_row(w, norm, params, n)
    w.close()


def ends_with_norm(members: Sequence[ir.Node]) -> bool:
    """MatMul/Gemm + epilogues + a norm of their result (``anchor_norm`` targets)."""
    return (
        len(members) >= 2
        and members[0].op_type in groups.MATRIX
        and members[-1].op_type in NORMS
        and all(m.domain in ("", "ai.onnx") for m in members)
        and members[-1].inputs[0] is members[-2].outputs[0]
    )


def why_not_anchor_norm(members: Sequence[ir.Node]) -> str | None:
    """None when ``emit_anchor_norm`` writes this kernel (the epilogue chain is the caller's to
    check), else why not."""
    return why_not_add_norm(members)


def emit_anchor_norm(w: CWriter, members: list[ir.Node], params: Params, emit_anchor) -> None:  # noqa: ANN001
    """The anchor kernel stores each output row of s (in s when others read it, else in a row
    buffer of n floats), then normalises it into y."""
    head, pre, norm = members[0], members[1:-1], members[-1]
    why = why_not_anchor_norm(members)
    if why is not None:
        raise OpfuseError(f"C backend: {who(norm)}: {why}")
    _check_outputs(norm)
    n = dims(norm.inputs[0], norm)[-1]
    s_value = norm.inputs[0]
    stored = s_value.is_graph_output() or any(r is not norm for r in s_value.consumers())

    def after_row(w: CWriter, row: str) -> None:
        y = params.out(norm.outputs[0], norm)
        w.open("")
        # the sum's row: in the stored output, or in the anchor's row buffer when nothing else
        # reads it (a post-norm block: BERT's)
        w(f"const float *xr = {params.out(s_value, head)} + {row};" if stored
          else f"const float *xr = {ROW_BUFFER};")
        w(f"float *yr = {y} + {row};")
        _normalise_row(w, norm, params, n)
        w.close()

    emit_anchor(w, head, pre, params, after_row, into_row=not stored)
