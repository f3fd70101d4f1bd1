"""Every fusion constraint, in the order the partitioner runs them (docs/architecture.md, "Named
constraints"): structural first (an opaque op, a stored value), then dtype, then what the target
file allows, then whether the code generator writes the kernel, then the chain limit. The first
refusal is the one a person should fix first."""

from __future__ import annotations

from opfuse.fusion.capability import BACKEND, CAPABILITY, DTYPES
from opfuse.fusion.constraints import Constraint, Edge
from opfuse.fusion.rules import Refusal
from opfuse.fusion.structural import STRUCTURE

CONSTRAINTS: tuple[Constraint, ...] = STRUCTURE + CAPABILITY + DTYPES + BACKEND
# a Linear's bias joining its MatMul is the anchor's own operand (fusion/transformer.py), which the
# target's epilogue capabilities do not judge
WITHOUT_CAPABILITY: tuple[Constraint, ...] = STRUCTURE + DTYPES + BACKEND


def first_refusal(
    edge: Edge, constraints: tuple[Constraint, ...] = CONSTRAINTS
) -> Refusal | None:
    """The first of ``constraints`` that refuses ``edge``, or None: v may join p's kernel."""
    for c in constraints:
        found = c.check(edge)  # the check itself: one call per constraint on the hot path
        if found is not None:
            return c.refusal(edge, found)
    return None
