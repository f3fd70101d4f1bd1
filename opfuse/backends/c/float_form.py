"""The form of a float kernel of the layer-by-layer C: which template writes it and how its
members split around that template (docs/architecture.md, "One partition, one plan"). The
emitter dispatches on it (``kernels._emit_float_kernel``) and the support predicate checks what
that form needs (``support._why_not_float``), so the two read one classification.

Forms: ``add_norm`` (a residual Add and its norm, storing the sum too), ``anchor_norm`` (an
anchor whose rows are normalised), ``view_matmul`` (a Transpose the MatMul reads as a strided
view), ``anchor`` (Conv, ConvTranspose, Gemm or MatMul + the epilogues on its output ``pre``, and
after a Conv a pool with its own epilogues ``post``; ``grow``: the first epilogue that broadcasts
the anchor's result up, as a squeeze-excite scale does), ``pool`` (a pool + its epilogues),
``typed`` (one op on masks or integers), ``chain`` (an elementwise chain), ``single`` (one op of
its own template), ``none`` (no template starts with that op and has ops after it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import onnx_ir as ir

from opfuse.backends.c.epilogue import EPILOGUE_OPS
from opfuse.backends.c.norms_add import ends_with_norm, is_add_norm
from opfuse.backends.c.pools import POOL_OPS
from opfuse.backends.c.typed import is_typed
from opfuse.ir.values import static_dims
from opfuse.ops import groups

ANCHOR_OPS = groups.C_ANCHORS
# Largest anchor result (float elements) kept on the stack when an epilogue broadcasts it up
LOCAL_LIMIT = 4096


@dataclass(frozen=True)
class FloatForm:
    kind: str
    head: ir.Node
    pre: tuple[ir.Node, ...] = ()
    pool: ir.Node | None = None
    post: tuple[ir.Node, ...] = ()
    grow: int | None = None  # index in ``pre`` of the first epilogue whose output is larger

    @property
    def small(self) -> ir.Value | None:
        """The anchor's result an epilogue broadcasts up (``grow``), kept on the stack."""
        if self.grow is None:
            return None
        return (self.pre[self.grow - 1] if self.grow else self.head).outputs[0]

    @property
    def small_elements(self) -> int:
        small = self.small
        return math.prod(static_dims(small) or ()) if small is not None else 0


def float_form(members: Sequence[ir.Node]) -> FloatForm:
    head, rest = members[0], tuple(members[1:])
    op = head.op_type
    if is_add_norm(list(members)):
        return FloatForm("add_norm", head, rest)
    if ends_with_norm(list(members)):
        return FloatForm("anchor_norm", head, rest)
    if op == "Transpose" and rest and rest[0].op_type == "MatMul":
        return FloatForm("view_matmul", head, rest)
    if op in ANCHOR_OPS:
        at = next((i for i, n in enumerate(rest) if n.op_type in POOL_OPS), None)
        pre = rest if at is None else rest[:at]
        pool = None if at is None else rest[at]
        post = () if at is None else rest[at + 1:]
        shape = static_dims(head.outputs[0])
        grow = next((i for i, n in enumerate(pre) if static_dims(n.outputs[0]) != shape), None)
        return FloatForm("anchor", head, pre, pool, post, grow)
    if op in POOL_OPS:
        return FloatForm("pool", head, rest)
    if not rest and is_typed(head):
        return FloatForm("typed", head)
    if op in EPILOGUE_OPS:
        return FloatForm("chain", head, rest)
    return FloatForm("none" if rest else "single", head, rest)
