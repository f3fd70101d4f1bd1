"""Named constraints: whether one node may join the kernel of its producer, as small registered
checks (docs/architecture.md, "Named constraints").

A ``Constraint`` is a record: its name, its family (structural, dtype, target capability, C
emittability), the reason code from ``REASONS`` it returns and the one-line message template a user
sees. Its check reads one ``Edge`` and returns the template's fields when it refuses, None when it
has nothing to say. A ``PatternConstraint`` is the same record for a pattern fusion (the attention
core, Add + norm): its check reads the pattern's match, and its template is the whole message. ``opfuse.fusion.checks.CONSTRAINTS`` runs them in order, most structural first,
so the first refusal is the one a person should fix first; ``docs/supported_ops.md`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import onnx_ir as ir

from opfuse.fusion.rules import Group, Refusal
from opfuse.fusion.support import KernelSupport
from opfuse.fusion.types import REASONS
from opfuse.targets import Target

STRUCTURAL = "structural"
DTYPE = "dtype"
TARGET = "target capability"
EMITTABLE = "C emittability"
FAMILIES = (STRUCTURAL, DTYPE, TARGET, EMITTABLE)

HEAD = "{consumer} cannot join {kernel} on {target}: "  # every message starts so


@dataclass(frozen=True)
class Edge:
    """The edge p -(x)-> v, v asking to join p's kernel ``group`` on ``target``."""

    p: ir.Node
    v: ir.Node
    x: ir.Value
    group: Group
    target: Target
    support: KernelSupport
    free: int = 0  # kernel members outside the chain limit (a Linear's bias, fusion/transformer.py)

    def fields(self) -> dict[str, object]:
        """The fields every message template may use."""
        return {
            "consumer": self.v.op_type,
            "producer": self.p.op_type,
            "kernel": self.group.label,
            "target": self.target.name,
            "anchor": self.group.head.op_type,
        }


Fields = dict[str, object]
Check = Callable[[Edge], "Fields | None"]


@dataclass(frozen=True)
class Constraint:
    name: str  # constraint_<what it checks>
    family: str  # one of FAMILIES
    reason: str  # a key of REASONS
    message: str  # the template after HEAD, formatted with Edge.fields() and the check's fields
    check: Check

    def __call__(self, edge: Edge) -> Refusal | None:
        found = self.check(edge)
        return None if found is None else self.refusal(edge, found)

    def refusal(self, edge: Edge, found: Fields) -> Refusal:
        """The refusal this constraint returns for ``edge``, its template filled with ``found``."""
        return Refusal(self.reason, (HEAD + self.message).format(**edge.fields(), **found))


def constraint(family: str, reason: str, message: str) -> Callable[[Check], Constraint]:
    """Declare the decorated check a ``Constraint`` named after it."""
    if family not in FAMILIES or reason not in REASONS:
        raise ValueError(f"unknown constraint family {family!r} or reason {reason!r}")

    def make(check: Check) -> Constraint:
        return Constraint(check.__name__, family, reason, message, check)

    return make


class Subject(Protocol):
    """What a pattern constraint reads: a pattern's match, with the fields every template may use."""

    def fields(self) -> Fields: ...


@dataclass(frozen=True)
class PatternConstraint:
    """A decline of a pattern fusion (fusion/pattern_checks.py), named as an edge's constraint is."""

    name: str  # constraint_<pattern>_<what it checks>
    family: str  # one of FAMILIES
    reason: str  # a key of REASONS
    template: str  # the whole message, formatted with Subject.fields() and the check's fields
    check: Callable[[Any], Fields | None]

    def __call__(self, subject: Subject) -> Refusal | None:
        found = self.check(subject)
        return None if found is None else self.refusal(subject, found)

    def refusal(self, subject: Subject, found: Fields) -> Refusal:
        return Refusal(self.reason, self.template.format(**subject.fields(), **found))


def pattern_constraint(
    family: str, reason: str, template: str
) -> Callable[[Callable[[Any], Fields | None]], PatternConstraint]:
    """Declare the decorated check a ``PatternConstraint`` named after it."""
    if family not in FAMILIES or reason not in REASONS:
        raise ValueError(f"unknown constraint family {family!r} or reason {reason!r}")

    def make(check: Callable[[Any], Fields | None]) -> PatternConstraint:
        return PatternConstraint(check.__name__, family, reason, template, check)

    return make


def first_pattern_refusal(
    subject: Subject, constraints: Sequence[PatternConstraint]
) -> Refusal | None:
    """The first of ``constraints`` that refuses ``subject``, or None: the pattern may fuse."""
    for c in constraints:
        found = c.check(subject)
        if found is not None:
            return c.refusal(subject, found)
    return None
