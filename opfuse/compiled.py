"""What compiling a model gives (``CompileResult``) and the one partition and arena plan each set of
options gets from it (``Schedule``): the value types every stage after the driver consumes
(analyze, the report, the C backend), kept below ``opfuse.pipeline`` so that a backend needs
nothing from the driver (docs/architecture.md, "One partition, one plan")."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import onnx
import onnx_ir as ir

from opfuse.frontends import import_proto
from opfuse.frontends.limits import Limits, current_limits, using_limits
from opfuse.fusion import Partition, trivial_partition
from opfuse.memory import MemoryPlan, plan_memory
from opfuse.targets import Target

DEFAULT_PLANNER = "greedy-inplace"


@dataclass(frozen=True)
class Schedule:
    """Kernels in the order they run and the arena plan they run on, for one set of options."""

    model: ir.Model  # the canonicalized model the kernels' nodes belong to
    partition: Partition
    plan: MemoryPlan
    cascades: bool  # whether ``partition`` keeps the cascades of the fused partition
    fused: bool  # False: one kernel per node of ``model`` (the unfused comparison)


@dataclass(frozen=True)
class CompileResult:
    source: str  # path or built-in model name
    optimized: ir.Model  # canonicalized
    partition: Partition  # kernels of ``optimized`` on ``target``
    passes: dict[str, int]  # pass name -> times fired
    target: Target
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # --input-value: graph inputs bound to constants (typed), fed to the reference runs too
    input_values: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    proto: onnx.ModelProto | None = field(default=None, repr=False)  # the model as read
    limits: Limits = field(default_factory=current_limits, repr=False)  # those it was read under
    # made by ``schedule``; not an init field, so dataclasses.replace starts a copy afresh
    _schedules: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def schedule(
        self,
        cascades: bool = True,
        planner: str = DEFAULT_PLANNER,
        bytes_per_element: int | None = None,
        fuse: bool = True,
    ) -> Schedule:
        """The one partition and arena plan for these options, made on first use and shared by
        every consumer (analyze, the report, ``--emit c``, ``--emulate``). ``cascades`` false:
        the fused partition without its cascades; ``fuse`` false: one kernel per node;
        ``bytes_per_element``: floats re-sized for a what-if precision (None: their own)."""
        key = (cascades and fuse, planner, bytes_per_element, fuse)
        if key not in self._schedules:
            if not fuse:
                part = trivial_partition(self.optimized)
            else:
                part = self.partition if cascades else self.partition.without_cascades()
            plan = plan_memory(self.optimized, part, planner, bytes_per_element)
            self._schedules[key] = Schedule(self.optimized, part, plan, key[0], fuse)
        return self._schedules[key]

    @cached_property
    def original(self) -> ir.Model:
        """The model as imported, every node its own kernel. Imported again from the proto on
        first use: that costs what a clone costs, and compile alone never needs it."""
        with using_limits(self.limits):
            return import_proto(self.proto, self.source, self.input_shapes, self.input_values)

    def fusion_json(self) -> dict:
        """What `opfuse fusion --json` prints: target, kernels, decisions, passes."""
        data = self.partition.to_json()
        data["passes"] = dict(self.passes)
        return data

    @cached_property
    def before(self) -> Partition:
        """The trivial partition of ``original``: the op-by-op schedule."""
        return trivial_partition(self.original)
