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

import math
from collections import Counter
from collections.abc import Callable

import onnx_ir as ir

from opfuse.backends.c import gather, groupnorm, layout, norms, norms_add, typed
from opfuse.backends.c.attention import emit_attention
from opfuse.backends.c.cgen import CWriter, collapse, contiguous, dims, offset_expr, who
from opfuse.backends.c.conv import emit_conv
from opfuse.backends.c.convt import emit_conv_transpose
from opfuse.backends.c.epilogue import EPILOGUE_OPS, build_chain, emit_apply
from opfuse.backends.c.int8 import INT8_KERNELS, is_int8_kernel
from opfuse.backends.c.matmul import emit_gemm, emit_matmul
from opfuse.backends.c.pools import POOL_OPS, emit_pool_kernel
from opfuse.backends.c.recurrent import RECURRENT_OPS, emit_recurrent
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError, Unsupported
from opfuse.fusion.attention import core_of
from opfuse.ops import groups
from opfuse.safe_text import for_comment

ANCHOR_OPS = groups.C_ANCHORS

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
    key = (members[0].op_type, kernel_dtype(members))
    if key not in REGISTRY:
        have = sorted(op for op, dt in REGISTRY if dt == key[1])
        raise Unsupported(
            f"C backend: no {key[1]} C kernel for op {key[0]} (node '{members[0].name}'); "
            f"{key[1]} kernels: {', '.join(have)}"
        )
    REGISTRY[key](w, members, params, opset)


def _emit_float_kernel(w: CWriter, members: list[ir.Node], params: Params, opset: int) -> None:
    head = members[0]
    op = head.op_type
    if op in ANCHOR_OPS and norms_add.ends_with_norm(members):  # each output row normalised
        norms_add.emit_anchor_norm(w, members, params, emit_gemm if op == "Gemm" else emit_matmul)
        return
    if op == "Transpose" and len(members) > 1 and members[1].op_type == "MatMul":
        # a Transpose the MatMul reads as a strided view (opfuse/fusion/views.py)
        emit_matmul(w, members[1], members[2:], params, view=head)
        return
    if op in ANCHOR_OPS:
        rest = members[1:]
        at = next((i for i, n in enumerate(rest) if n.op_type in POOL_OPS), None)
        pre = rest if at is None else rest[:at]
        pool = None if at is None else rest[at]
        post = [] if at is None else rest[at + 1 :]
        if pool is not None and op != "Conv":
            raise OpfuseError(f"C backend: {who(pool)}: a pool fused after {op} is not emitted")
        grow = _growth(head, pre)
        if grow is not None and pool is None:
            # an epilogue broadcasts the anchor's result up to a larger shape (a squeeze-excite
            # scale): the anchor and the epilogues before it write a stack array, and the rest
            # runs as a broadcast chain over the larger output, reading that array
            small = (pre[grow - 1] if grow else head).outputs[0]
            params.local(w, small, head)
            _emit_float_kernel(w, [head, *pre[:grow]], params, opset)
            emit_elementwise(w, pre[grow:], params)
            return
        if op == "Conv":
            emit_conv(w, head, pre, pool, post, params)
        elif op == "ConvTranspose":
            emit_conv_transpose(w, head, pre, params)
        elif op == "Gemm":
            emit_gemm(w, head, pre, params)
        else:
            emit_matmul(w, head, pre, params)
        return
    if op in POOL_OPS:
        emit_pool_kernel(w, members, params)
        return
    if norms_add.is_add_norm(members):  # the residual Add + its norm, storing the sum too
        norms_add.emit_add_norm(w, members, params)
        return
    if len(members) == 1 and typed.is_typed(head):  # integer arithmetic: typed operands
        typed.emit_typed(w, head, params)
        return
    if op in EPILOGUE_OPS:
        emit_elementwise(w, members, params)
        return
    if len(members) != 1:
        raise OpfuseError(f"C backend: {who(head)}: a fused kernel cannot start with {op}")
    if op == "Constant":
        w(f"/* Constant '{for_comment(head.name)}': its value lives in weights.c */")
    elif op == "Softmax":
        norms.emit_softmax(w, head, params, opset)
    else:
        SINGLE[op](w, head, params)


# Largest anchor result (float elements) kept on the stack when an epilogue broadcasts it up
LOCAL_LIMIT = 4096


def _growth(head: ir.Node, chain: list[ir.Node]) -> int | None:
    """Index in ``chain`` of the first member whose output is larger than the anchor's, when the
    anchor's result is small enough to keep on the stack (None: no such member, or too large)."""
    shape = dims(head.outputs[0], head)
    for i, node in enumerate(chain):
        if dims(node.outputs[0], node) != shape:
            small = (chain[i - 1] if i else head).outputs[0]
            return i if math.prod(dims(small, head)) <= LOCAL_LIMIT else None
    return None


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
