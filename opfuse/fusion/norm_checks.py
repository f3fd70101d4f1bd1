"""Why a norm does not join the kernel of the Add before it (storing the sum as a second output),
as named pattern constraints (docs/architecture.md, "Transformer fusions"): first what the kernel
it would join does (an anchor's output rows, a sum already stored), then the row the norm needs
(a static shape, the last axis alone, no statistics read) and the order of the sum's readers."""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from opfuse.fusion.constraints import (
    STRUCTURAL,
    TARGET,
    Fields,
    PatternConstraint,
    pattern_constraint,
)
from opfuse.fusion.rules import ANCHOR, ELEMWISE, Group
from opfuse.ops import groups
from opfuse.targets import Target

HEAD = "{consumer} cannot join {kernel}{second_output}: "


@dataclass(frozen=True)
class NormCase:
    """The norm ``v`` reading the sum ``x`` that ``p``, the tip of ``group``, writes."""

    p: ir.Node
    v: ir.Node
    x: ir.Value
    group: Group
    index: dict[int, int]  # id(node) -> its place in the schedule
    target: Target

    @property
    def others(self) -> list[ir.Node]:
        """The sum's readers besides the norm."""
        return [r for r in self.x.consumers() if r is not self.v]

    @property
    def in_anchor(self) -> bool:
        return self.group.stage == ANCHOR and self.group.head.op_type in groups.MATRIX

    def dims(self) -> tuple[int, ...] | None:
        shape = self.x.shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        return tuple(shape)

    def fields(self) -> Fields:
        second = " with the sum as a second output" if self.others else ""
        return {"consumer": self.v.op_type, "kernel": self.group.label, "second_output": second,
                "producer": self.p.op_type, "anchor": self.group.head.op_type}


@pattern_constraint(TARGET, "not_supported_by_target",
                    HEAD + "its {anchor} kernels do not normalise their output rows "
                    "(anchor_norm = false)")
def constraint_add_norm_anchor_rows(c: NormCase) -> Fields | None:
    return {} if c.in_anchor and not c.target.fusion.anchor_norm else None


@pattern_constraint(STRUCTURAL, "multiple_consumers",
                    HEAD + "'{value}' is read by {readers} nodes and its {producer} already "
                    "joined the {kernel} kernel, which stores it")
def constraint_add_norm_sum_in_elementwise(c: NormCase) -> Fields | None:
    if c.in_anchor or c.group.stage == ELEMWISE:
        return None
    return {"value": c.x.name, "readers": len(c.x.consumers())}


@pattern_constraint(STRUCTURAL, "dynamic_shape",
                    HEAD + "'{value}' has no static shape of rank 2 or more")
def constraint_add_norm_static_shape(c: NormCase) -> Fields | None:
    return {"value": c.x.name} if c.dims() is None else None


@pattern_constraint(STRUCTURAL, "not_supported_by_target",
                    HEAD + "'{value}' has no static shape of rank 2 or more")
def constraint_add_norm_rows(c: NormCase) -> Fields | None:
    return {"value": c.x.name} if len(c.dims()) < 2 else None


@pattern_constraint(STRUCTURAL, "not_supported_by_target",
                    HEAD + "it normalises from axis {axis}, not the last axis alone")
def constraint_add_norm_last_axis(c: NormCase) -> Fields | None:
    axis, rank = c.v.attributes.get("axis"), len(c.dims())
    if axis is None or axis.as_int() % rank == rank - 1:
        return None
    return {"axis": axis.as_int()}


@pattern_constraint(STRUCTURAL, "not_supported_by_target",
                    HEAD + "its Mean/InvStdDev outputs are read")
def constraint_add_norm_statistics_unread(c: NormCase) -> Fields | None:
    return {} if any(o is not None and o.consumers() for o in c.v.outputs[1:]) else None


@pattern_constraint(STRUCTURAL, "multiple_consumers",
                    HEAD + "'{reader}' reads '{value}' before {consumer} runs")
def constraint_add_norm_readers_after(c: NormCase) -> Fields | None:
    tip = c.index[id(c.v)]
    early = [r for r in c.others if c.index.get(id(r), tip + 1) < tip]
    return {"reader": early[0].name, "value": c.x.name} if early else None


ADD_NORM: tuple[PatternConstraint, ...] = (
    constraint_add_norm_anchor_rows,
    constraint_add_norm_sum_in_elementwise,
    constraint_add_norm_static_shape,
    constraint_add_norm_rows,
    constraint_add_norm_last_axis,
    constraint_add_norm_statistics_unread,
    constraint_add_norm_readers_after,
)
