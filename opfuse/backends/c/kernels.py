"""One C function per kernel: classify the kernel's members and call the right template.

A kernel of the partition is one of
* an anchor (Conv, ConvTranspose, Gemm, MatMul) + its epilogue chain (+ a pool and the pool's
  epilogue, on ``anchor_pool`` targets);
* a pool + its epilogue chain;
* a standalone elementwise/broadcast chain;
* one data-movement or reduction op;
* an attention core (``attention.py``: scores, scale/mask, softmax, weighted sum, by query rows).
Anything else has no C kernel: ``errors.Unsupported`` (exit 3), naming the op and the node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import onnx_ir as ir

from opfuse.backends.c import gather, groupnorm, layout, norms, norms_add, typed
from opfuse.backends.c.attention import emit_attention
from opfuse.backends.c.cgen import CWriter, collapse, contiguous, dims, offset_expr, who
from opfuse.backends.c.col2im import emit_col2im
from opfuse.backends.c.conv import emit_conv, emit_conv_view
from opfuse.backends.c.convt import emit_conv_transpose
from opfuse.backends.c.epilogue import EPILOGUE_OPS, build_chain, emit_apply
from opfuse.backends.c.float_form import ANCHOR_OPS, LOCAL_LIMIT, float_form
from opfuse.backends.c.int8 import INT8_KERNELS, is_int8_kernel
from opfuse.backends.c.int8.chain import CHAIN_OPS
from opfuse.backends.c.int8.conv import emit_conv8_view
from opfuse.backends.c.matmul import emit_gemm, emit_matmul
from opfuse.backends.c.pools import POOL_OPS, emit_pool_kernel
from opfuse.backends.c.recurrent import RECURRENT_OPS, emit_recurrent
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError, Unsupported
from opfuse.fusion.attention import core_of
from opfuse.fusion.views import nhwc_view
from opfuse.ops import groups
from opfuse.safe_text import for_comment

Single = Callable[[CWriter, ir.Node, Params], None]
SINGLE: dict[str, Single] = {
    **{op: layout.emit_view for op in layout.VIEW_OPS},
    "Transpose": layout.emit_transpose,
    "Concat": layout.emit_concat,
    "Slice": layout.emit_slice,
    "Split": layout.emit_split,
    "Expand": layout.emit_expand,
    "Pad": layout.emit_pad,
    "Resize": layout.emit_resize,
    "LayerNormalization": norms.emit_layernorm,
    "RMSNormalization": norms_add.emit_rmsnorm,
    **{op: norms.emit_reduce for op in norms.REDUCE_OPS},
    "Gather": gather.emit_gather,
    "InstanceNormalization": groupnorm.emit_instance_norm,
    "GroupNormalization": groupnorm.emit_group_norm,
    **{op: typed.emit_typed for op in (*typed.MASK_OPS, "Range")},
    **{op: emit_recurrent for op in RECURRENT_OPS},
    "Col2Im": emit_col2im,
}

FLOAT_COVERED = frozenset(
    ANCHOR_OPS | POOL_OPS | EPILOGUE_OPS | SINGLE.keys() | groups.C_SOFTMAX | {"Constant"})

Emitter = Callable[[CWriter, list[ir.Node], Params, int], None]


def _emit_float(w: CWriter, members: list[ir.Node], params: Params, opset: int) -> None:
    _emit_float_kernel(w, members, params, opset)


# The kernel registry: (head op, dtype) -> emitter. int8 kernels are siblings of the float ones.
REGISTRY: dict[tuple[str, str], Emitter] = {
    **{(op, "float"): _emit_float for op in FLOAT_COVERED},
    **{(op, "int8"): fn for op, fn in INT8_KERNELS.items()},
}
COVERED = frozenset(op for op, _ in REGISTRY)


def _is_covered(node: ir.Node) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in COVERED


def _unsupported(missing: list[ir.Node]) -> Unsupported:
    """Every op without a C kernel, with its count and first node (as Vela's and ST Edge AI's
    reports list them), not only the first one met."""
    first: dict[tuple[str, str], ir.Node] = {}
    count: Counter[tuple[str, str]] = Counter()
    for node in missing:
        key = (node.op_type, node.domain if node.domain not in ("", "ai.onnx") else "")
        first.setdefault(key, node)
        count[key] += 1
    parts = [f"op {op}{f' (domain {domain})' if domain else ''}"
             f"{f' x{count[op, domain]}' if count[op, domain] > 1 else ''} (node '{node.name}')"
             for (op, domain), node in list(first.items())[:SHOWN]]
    more = f", and {len(first) - SHOWN} more op types" if len(first) > SHOWN else ""
    return Unsupported(f"C backend: no C kernel for {', '.join(parts)}{more} "
                       f"({len(missing)} of the model's nodes; docs/supported_ops.md lists the "
                       f"{len(COVERED)} ops the C covers)")


SHOWN = 12  # op types named in the refusal


def check_covered(nodes: list[ir.Node]) -> None:
    missing = [node for node in nodes if not _is_covered(node)]
    if missing:
        raise _unsupported(missing)


def kernel_dtype(members: list[ir.Node]) -> str:
    return "int8" if is_int8_kernel(members) else "float"


def emit_kernel(w: CWriter, members: list[ir.Node], params: Params, opset: int) -> None:
    """The body of one kernel function (parameters are collected in ``params``), from the
    registry entry of its head op and dtype."""
    check_covered(members)
    core = core_of(members) if len(members) > 2 else None
    if core is not None:  # the attention core, streamed by query rows
        emit_attention(w, core, params)
        return
    view = nhwc_view(members)
    if view is not None:  # a graph input's NHWC -> NCHW Transpose read in place (fusion/views.py)
        if is_int8_kernel(members[1:]):
            _anchor_chain(members[2:], "int8 Conv", CHAIN_OPS)
            emit_conv8_view(w, view, members[1], members[2:], params)
        else:
            _anchor_chain(members[2:], "Conv", EPILOGUE_OPS)
            emit_conv_view(w, view, members[1], members[2:], params)
        return
    key = (members[0].op_type, kernel_dtype(members))
    if key not in REGISTRY:
        have = sorted(op for op, dt in REGISTRY if dt == key[1])
        raise Unsupported(
            f"C backend: no {key[1]} C kernel for op {key[0]} (node '{members[0].name}'); "
            f"{key[1]} kernels: {', '.join(have)}"
        )
    REGISTRY[key](w, members, params, opset)


def _anchor_chain(chain: list[ir.Node], what: str, ops: frozenset[str]) -> None:
    """The ops after a conv reading an NHWC input in place: its epilogue chain only."""
    for n in chain:
        if n.op_type not in ops:
            raise OpfuseError(f"C backend: {who(n)}: a {what} reading an NHWC input in place "
                              "takes only elementwise ops after it")


def _emit_float_kernel(w: CWriter, members: list[ir.Node], params: Params, opset: int) -> None:
    form = float_form(members)
    head, op = form.head, form.head.op_type
    if form.kind == "anchor_norm" and op in ANCHOR_OPS:  # each output row normalised
        norms_add.emit_anchor_norm(w, members, params, emit_gemm if op == "Gemm" else emit_matmul)
        return
    if form.kind == "view_matmul":  # a Transpose the MatMul reads as a strided view (fusion/views.py)
        emit_matmul(w, members[1], members[2:], params, view=head)
        return
    if form.kind == "anchor":
        pre, pool = list(form.pre), form.pool
        if pool is not None and op != "Conv":
            raise OpfuseError(f"C backend: {who(pool)}: a pool fused after {op} is not emitted")
        if form.grow is not None and pool is None and form.small_elements <= LOCAL_LIMIT:
            # an epilogue broadcasts the anchor's result up to a larger shape (a squeeze-excite
            # scale): the anchor and the epilogues before it write a stack array, and the rest
            # runs as a broadcast chain over the larger output, reading that array
            params.local(w, form.small, head)
            _emit_float_kernel(w, [head, *pre[:form.grow]], params, opset)
            emit_elementwise(w, pre[form.grow:], params)
            return
        if op == "Conv":
            emit_conv(w, head, pre, pool, list(form.post), params)
        elif op == "ConvTranspose":
            emit_conv_transpose(w, head, pre, params)
        elif op == "Gemm":
            emit_gemm(w, head, pre, params)
        else:
            emit_matmul(w, head, pre, params)
        return
    if form.kind == "pool":
        emit_pool_kernel(w, members, params)
        return
    if form.kind == "add_norm":  # the residual Add + its norm, storing the sum too
        norms_add.emit_add_norm(w, members, params)
        return
    if form.kind == "typed":  # integer arithmetic: typed operands
        typed.emit_typed(w, head, params)
        return
    if form.kind == "chain":
        emit_elementwise(w, members, params)
        return
    if form.kind != "single":
        raise OpfuseError(f"C backend: {who(head)}: a fused kernel cannot start with {op}")
    if op == "Constant":
        w(f"/* Constant '{for_comment(head.name)}': its value lives in weights.c */")
    elif op == "Softmax":
        norms.emit_softmax(w, head, params, opset)
    else:
        SINGLE[op](w, head, params)


def emit_elementwise(w: CWriter, nodes: list[ir.Node], params: Params) -> None:
    """A standalone elementwise/broadcast chain over its last node's output (dims collapsed)."""
    last = nodes[-1].outputs[0]
    shape = dims(last, nodes[-1])
    chain = build_chain(nodes, shape, params, None, exact=False)
    y = params.out(last, nodes[-1])
    cs, strides = collapse(shape, [*(o.strides for o in chain.operands), contiguous(shape)])
    coords = []
    for d, size in enumerate(cs[:-1]):
        w.open(f"for (int e{d} = 0; e{d} < {size}; ++e{d})")
        coords.append(f"e{d}")
    ys = strides[-1]
    emit_apply(w, chain, strides[:-1], [*coords, "0"], cs[-1], None,
               lambda i: f"{y}[{offset_expr([*coords, i], ys)}]")
    for _ in cs[:-1]:
        w.close()
