"""Every pattern fusion and the named constraints that decline it, in the order they run
(docs/architecture.md, "Named constraints"). The edge constraints (``checks.py``) judge one node
joining a kernel; these judge a whole match: the attention core (``attention_checks.py``), a norm
joining the Add before it (``norm_checks.py``). A Linear's bias, a MatMul reading a transposed
operand and a Conv reading an NHWC graph input decline with no records of their own: when they do not apply, the edge constraints decide.
``docs/supported_ops.md`` lists them per target."""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.fusion.attention_checks import ATTENTION, constraint_attention_no_epilogue
from opfuse.fusion.constraints import PatternConstraint
from opfuse.fusion.norm_checks import ADD_NORM


@dataclass(frozen=True)
class Pattern:
    name: str
    key: str | None  # the target file's ``[fusion]`` key that enables it; None: every target
    where: str  # when it applies, in a line
    constraints: tuple[PatternConstraint, ...]  # its declines, in the order they run
    on: str = "yes"  # what the page says where the key is true (or there is no key)
    off: str = "no"


PATTERNS: tuple[Pattern, ...] = (
    Pattern("attention core", "attention",
            "MatMul, scale/mask ops, Softmax, MatMul (and the Transposes around them) as one "
            "kernel streaming query rows (fusion/attention.py)",
            (*ATTENTION, constraint_attention_no_epilogue)),
    Pattern("Add + norm", "anchor_norm",
            "a LayerNorm/RMSNorm joins the kernel of the Add before it, which stores the sum as a "
            "second output when others read it: after a standalone Add on every target, after a "
            "MatMul/Gemm kernel where `anchor_norm` (fusion/transformer.py)", ADD_NORM,
            "after an Add or a MatMul/Gemm", "after a standalone Add"),
    Pattern("Linear bias", "anchor_bias",
            "MatMul + Add of a constant [N] is the kernel's bias, outside max_chain; otherwise the "
            "Add is an epilogue and the edge constraints decide (fusion/transformer.py)", ()),
    Pattern("MatMul reading a transposed operand", None,
            "a Transpose read by one MatMul joins its kernel as a strided view where the backend "
            "writes one; otherwise `layout_change` (fusion/views.py)", (),
            "where the backend writes it"),
    Pattern("Conv reading an NHWC graph input", None,
            "a TFLite model's input Transpose (NHWC -> NCHW) read by one Conv joins its kernel, "
            "which reads the input in place with NHWC rows, outside max_chain, where the backend's "
            "conv path reads NHWC; otherwise `layout_change` (fusion/views.py)", (),
            "where the backend writes it"),
)
PATTERN_CONSTRAINTS: tuple[PatternConstraint, ...] = tuple(
    c for p in PATTERNS for c in p.constraints
)
