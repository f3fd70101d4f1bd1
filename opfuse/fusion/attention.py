"""The attention core as one kernel that streams query rows, so the score matrix never exists whole.

The pattern (what ``torch.onnx.export`` writes for scaled dot-product attention, eager or SDPA)::

    S = MatMul(Q, Kt)      Q (..., M, D), Kt (..., D, N): K already transposed, or a Transpose
    S = S op x             any of Mul / Div / Add / Sub by an x that broadcasts to S (a scale, an
                           additive mask; a scale folded into Q is simply absent), or Where(c, S, x)
    P = Softmax(S, axis=-1)
    O = MatMul(P, V)       V (..., N, Dv)

The algebra: ``O[b, m, :] = sum_j softmax_j(f(Q[b, m, :] . Kt[b, :, j])) V[b, j, :]``, and row m of O
depends on row m of Q only. So one kernel computes, per (batch, head, query row), the N scores into
a scratch row, applies f, takes the softmax in place (max subtracted) and accumulates the weighted
rows of V into O's row, ``block_rows`` query rows at a time so each row of K and V is read once per
block. The (..., M, N) scores and probabilities are never stored; the scratch rows are a
``RingBuffer`` of ``block_rows`` rows of the scores (4 on a board, up to 64 on the host), which
the memory planner places in the arena for the kernel's step (docs/architecture.md,
"Attention"). A Transpose that makes Q, Kt or V and is read by nothing else joins the kernel: it reads the Transpose's input through permuted strides.

The pass runs on the greedy partition (``partition.py``), before cascades. Each recognised core's
nodes leave the kernels they were in (what is left of a kernel stays a kernel) and become one
kernel named ``attention``. No cycle: every value inside the core has a single reader inside it,
so only MatMul(P, V)'s output leaves it; what is left of a kernel keeps its members' order, and
its last node is the only one read from outside. The invariant of ``partition.py`` holds, and
ordering kernels by their last node stays topological.

A Softmax between two MatMuls that is not fused gets a Decision on its Softmax -> MatMul edge:
``multiple_consumers`` / ``graph_output`` (scores or probabilities read elsewhere),
``attention_softmax_axis``, ``dynamic_shape``, ``attention_mask`` (an operand that does not
broadcast over the scores), ``not_supported_by_target`` (the target's ``[fusion] attention`` is
false, or the backend cannot write it). Each decline is a named constraint in
``attention_checks.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from opfuse.schedule import RingBuffer

SCORE_OPS = frozenset({"Mul", "Div", "Add", "Sub", "Where"})
MAX_SCORE_OPS = 4  # scale, mask, and room for an exporter's second scale or a Where
KERNEL_NAME = "attention"


@dataclass(frozen=True)
class Core:
    """One attention core's nodes: ``scores`` are the ops between the two MatMuls and the Softmax."""

    qk: ir.Node  # MatMul(Q, Kt)
    scores: tuple[ir.Node, ...]
    softmax: ir.Node
    pv: ir.Node  # MatMul(P, V)
    transposes: tuple[ir.Node, ...]  # absorbed producers of Q, Kt or V
    out_transpose: ir.Node | None = None  # an absorbed Transpose of O that keeps its last axis

    @property
    def nodes(self) -> tuple[ir.Node, ...]:
        tail = (self.out_transpose,) if self.out_transpose is not None else ()
        return (*self.transposes, self.qk, *self.scores, self.softmax, self.pv, *tail)

    @property
    def output(self) -> ir.Value:
        """The value the kernel writes: O, or its absorbed Transpose's output."""
        return (self.out_transpose or self.pv).outputs[0]

    @property
    def score_value(self) -> ir.Value:
        return self.qk.outputs[0]

    def source(self, value: ir.Value) -> tuple[ir.Value, tuple[int, ...] | None]:
        """The tensor the kernel reads for ``value`` (Q, Kt or V) and the permutation it applies."""
        p = value.producer()
        if p is not None and any(p is t for t in self.transposes):
            return p.inputs[0], perm_of(p)
        return value, None


def _std(node: ir.Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def dims(value: ir.Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None:
        return None
    shape = tuple(value.shape)
    return shape if all(isinstance(d, int) for d in shape) else None


def perm_of(node: ir.Node) -> tuple[int, ...]:
    attr = node.attributes.get("perm")
    rank = len(node.inputs[0].shape) if node.inputs[0].shape is not None else 0
    return tuple(attr.as_ints()) if attr is not None else tuple(reversed(range(rank)))


def sole_reader(value: ir.Value | None, node: ir.Node) -> bool:
    return (
        value is not None
        and not value.is_graph_output()
        and all(c is node for c in value.consumers())
    )


def _transposes(core_inputs: Sequence[tuple[ir.Value, ir.Node]]) -> tuple[ir.Node, ...]:
    found: list[ir.Node] = []
    for value, reader in core_inputs:
        p = value.producer()
        if (_std(p, "Transpose") and p.inputs and p.inputs[0] is not None
                and sole_reader(value, reader) and all(p is not t for t in found)):
            found.append(p)
    return tuple(found)


def match(softmax: ir.Node) -> Core | None:
    """The attention core around ``softmax``, if its shape is one (checks come later)."""
    if not _std(softmax, "Softmax") or not softmax.outputs:
        return None
    pv = next((c for c in softmax.outputs[0].consumers()
               if _std(c, "MatMul") and c.inputs[0] is softmax.outputs[0]), None)
    if pv is None:
        return None
    scores: list[ir.Node] = []
    value = softmax.inputs[0]
    while value is not None:
        p = value.producer()
        if _std(p, "MatMul"):
            break
        if p is None or p.op_type not in SCORE_OPS or p.domain not in ("", "ai.onnx"):
            return None
        if len(scores) == MAX_SCORE_OPS:
            return None
        scores.insert(0, p)
        value = _score_input(p)
    if value is None:
        return None
    qk = value.producer()
    if any(dims(v) is not None and len(dims(v)) < 2 for v in (*qk.inputs, *pv.inputs)):
        return None
    inputs = [(qk.inputs[0], qk), (qk.inputs[1], qk), (pv.inputs[1], pv)]
    return Core(qk, tuple(scores), softmax, pv, _transposes(inputs), _out_transpose(pv))


def _out_transpose(pv: ir.Node) -> ir.Node | None:
    """The Transpose that alone reads O and keeps its last axis last (heads merged back: perm
    0,2,1,3), so the kernel writes its rows contiguously at permuted row offsets."""
    out = pv.outputs[0]
    readers = out.consumers()
    if len(readers) != 1 or out.is_graph_output() or not _std(readers[0], "Transpose"):
        return None
    perm = perm_of(readers[0])
    return readers[0] if perm and perm[-1] == len(perm) - 1 else None


def _score_input(node: ir.Node) -> ir.Value | None:
    """The input of a score op that carries the scores: the one whose producer leads to a MatMul.
    A Where carries them in its second or third input; Div and Sub only as their first."""
    candidates = node.inputs[1:3] if node.op_type == "Where" else node.inputs[:2]
    for value in candidates:
        p = value.producer() if value is not None else None
        if p is not None and (p.op_type in SCORE_OPS or _std(p, "MatMul")) and _leads_to_matmul(p):
            return value
    return None


def _leads_to_matmul(node: ir.Node) -> bool:
    for _ in range(MAX_SCORE_OPS + 1):
        if _std(node, "MatMul"):
            return True
        value = _score_input(node) if node.op_type in SCORE_OPS else None
        node = value.producer() if value is not None else None
        if node is None:
            return False
    return False


def core_of(members: Sequence[ir.Node]) -> Core | None:
    """The core whose nodes are exactly ``members`` (a kernel of the partition), or None."""
    softmax = next((n for n in members if _std(n, "Softmax")), None)
    core = match(softmax) if softmax is not None else None
    if core is None or {id(n) for n in core.nodes} != {id(n) for n in members}:
        return None
    return core


BLOCK_ROWS = 4  # query rows per block on an MCU board: the board tile's MR, the arena stays small
# on the host, a block's scores (rows x N floats) are at most this: 128 KB, an L2's share, so the
# MatMul core's tiles re-read them from cache for P @ V
HOST_SCORE_FLOATS = 32 * 1024
HOST_MAX_ROWS = 64  # more rows amortize K's panel copy and V's reads no further
# host blocks are whole tiles of the MatMul core's 8 rows (its AVX-512 tile, docs/architecture.md
# "The float MatMul/Gemm core"): Whisper's N = 1500 gives 16 rows, which ran 1.02x faster than 20
# (two tiles of 8 and one of 4), thread CPU time, Zen 4
HOST_ROW_STEP = 8


def block_rows(core: Core, on_board: bool = False) -> int:
    """Query rows the kernel computes together: ``BLOCK_ROWS`` on a board; on the host the most
    multiple of ``HOST_ROW_STEP`` whose scores fit ``HOST_SCORE_FLOATS`` (at most
    ``HOST_MAX_ROWS``); at most M."""
    shape = dims(core.score_value)
    m = shape[-2] if len(shape) > 1 else 1
    rows = BLOCK_ROWS
    if not on_board:
        fit = min(HOST_MAX_ROWS, HOST_SCORE_FLOATS // max(shape[-1], 1))
        rows = max(BLOCK_ROWS, fit // HOST_ROW_STEP * HOST_ROW_STEP)
    return max(1, min(rows, m))


def scratch_rings(core: Core, on_board: bool = False) -> tuple[RingBuffer, ...]:
    """The kernel's arena scratch: ``block_rows`` rows of the scores (N floats each), as a ring
    buffer of the score value; on the host, when Kt's keys are strided (K through its Transpose),
    also one head of Kt (D rows of N floats), which the kernel packs into the MatMul core's
    panels once per head instead of once per block of query rows."""
    shape = dims(core.score_value)
    n = shape[-1]
    rows = int(np.prod(shape[:-1]))
    scores = RingBuffer(core.score_value.name, block_rows(core, on_board), rows, n * 4)
    if on_board or not packs_kt(core):
        return (scores,)
    kt = core.qk.inputs[1]
    kt_shape = dims(kt)
    head = RingBuffer(kt.name, kt_shape[-2], int(np.prod(kt_shape[:-1])), n * 4)
    return (scores, head)


def packs_kt(core: Core) -> bool:
    """Whether Kt is read through an absorbed Transpose that moves its keys off the last axis
    (their stride is not 1), so a head of it is worth packing once."""
    src, perm = core.source(core.qk.inputs[1])
    shape = dims(src)
    return perm is not None and shape is not None and perm[-1] != len(perm) - 1 \
        and dims(core.qk.inputs[1])[-1] > 1
