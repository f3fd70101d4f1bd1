"""Cascades: chains of layer-by-layer kernels streamed in bands of rows, cut against the peak arena.

The algorithm
-------------
Input: the layer-by-layer partition (``partition.py``) in schedule order, and the target's
``cascade`` capability. A cascade is a run of consecutive kernels ``k[i] .. k[j]`` executed as one
kernel in bands of ``cascade_band_rows`` output rows of ``k[j]``; every value between two members is
a ring buffer of the rows its consumer's window needs (``rings.py``), never a whole tensor.

1. *Stages.* A kernel may be a member when each of its ops streams rows (``stages.py``); otherwise
   the edges around it are refused with ``cascade_global_op``.
2. *Links.* ``k[i] -> k[i+1]`` may be inside a cascade when ``k[i]`` writes exactly one value, read
   only by the first op of ``k[i+1]`` (``multiple_consumers`` otherwise: a value read twice would
   need a ring sized for the later reader), that value is not a graph output (``graph_output``),
   ``k[i+1]`` reads no second full activation unless ``cascade_residual`` (``not_supported_by_target``),
   the value is at least ``cascade_min_width`` columns wide (``not_supported_by_target``),
   and the ring is smaller than the tensor (``cascade_no_gain``). Only neighbours in the schedule
   link, so a cascade never reorders kernels and the schedule stays topological.
3. *Cuts.* Maximal runs of linked kernels are cut into cascades by dynamic programming on a proxy
   of the arena: the bytes live at the cascade's step = every arena buffer of the layer-by-layer
   schedule (in-place outputs merged with their inputs, as greedy-inplace places them) live at any
   of its members' steps, minus the buffers the cascade turns into rings (a buffer shared by
   in-place values once every one of them is a ring), plus the rings. A segment holds at most ``cascade_max_anchors`` anchors (``cascade_limit``). First pass,
   per run: the least achievable maximum; their maximum over runs is the peak ``P`` cascades can
   reach. When ``P`` is not below the layer-by-layer peak, no cascade pays (the same arena, and
   bands cost time the arena does not buy back): every kernel stays apart (``cascade_no_gain``),
   unless the target's ``cascade_same_arena`` says its bands are free.
   Second pass, per run: the fewest segments whose live bytes all stay within ``P`` (fewer
   kernels move fewer bytes and dispatch less; rows streaming adds no MACs, so this is the least
   cost at the least peak). A cut the second pass keeps gets ``cascade_limit`` when joining its two
   sides would exceed the anchor limit, else ``cascade_no_gain`` (joining them would raise the live
   bytes above ``P``: a cascade keeps its input and its output whole for its whole duration).
4. *Decisions.* Edges inside a cascade lose their layer-by-layer decision (they are fused now).
   Every edge between neighbouring kernels left apart gets a cascade decision
   (``Partition.cascade_decisions``) with the reason the cascade step declined it; the layer-by-layer
   decision of that edge (why the two ops are not one kernel) stays as it was.

Cost: O(runs x length^2 x live tensors); runs are short (a cascade ends at every branch).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import onnx_ir as ir

from opfuse.fusion.rings import ring_rows
from opfuse.fusion.rules import Refusal
from opfuse.fusion.stages import WINDOWED, Stage, chain_input, rows_of, stage_of
from opfuse.fusion.support import ANY, KernelSupport
from opfuse.memory import inplace as _inplace
from opfuse.memory import lifetimes as _lifetimes
from opfuse.schedule import Decision, Kernel, Partition, RingBuffer
from opfuse.targets import Target


@dataclass(frozen=True)
class _Link:
    value: ir.Value  # the value k[i] writes and k[i+1] streams


def cascade(
    model: ir.Model, base: Partition, target: Target, support: KernelSupport = ANY
) -> Partition:
    """``base`` with runs of kernels merged into cascades on ``target`` (see the module note);
    a kernel ``support`` cannot stream is no member of any."""
    caps = target.fusion
    kernels = base.kernels
    if not caps.cascade or len(kernels) < 2:
        return base
    nodes = {n.name: n for n in model.graph}
    stages = [_streamed(stage_of(k, nodes, target), k, nodes, target, support) for k in kernels]
    links: list[_Link | Refusal] = [
        _link(kernels[i], kernels[i + 1], stages[i], stages[i + 1], nodes, target)
        for i in range(len(kernels) - 1)
    ]
    plan = _Planner(model, base, target, stages, links)
    segments = plan.cut()
    refusals: dict[int, Refusal] = {
        i: link for i, link in enumerate(links) if isinstance(link, Refusal)
    }
    refusals.update(plan.cut_reasons(segments))
    declined = _cascade_decisions(kernels, nodes, segments, refusals)
    out: list[Kernel] = []
    count = 0
    for i, j in segments:
        if i == j:
            out.append(kernels[i])
            continue
        count += 1
        out.append(plan.build(i, j, "cascade" if count == 1 else f"cascade_{count}"))
    if count == 0:
        return replace(base, cascade_decisions=declined)
    decisions = _decisions(base, segments)
    return Partition(base.target, tuple(out), decisions, base=base, cascade_decisions=declined)


def _streamed(
    stage: Stage | Refusal, kernel: Kernel, nodes: dict, target: Target, support: KernelSupport
) -> Stage | Refusal:
    """``stage``, unless the code generator has no row kernel for ``kernel``."""
    if isinstance(stage, Refusal):
        return stage
    why = support.why_not_stream([nodes[n] for n in kernel.nodes])
    if why is None:
        return stage
    return Refusal(
        "not_supported_by_target",
        f"{kernel.name} cannot stream rows in a cascade on {target.name}: {support.backend} has "
        f"no row kernel for it ({why})",
    )


def _link(
    a: Kernel, b: Kernel, sa: Stage | Refusal, sb: Stage | Refusal, nodes: dict, target: Target
) -> _Link | Refusal:
    for stage in (sa, sb):
        if isinstance(stage, Refusal):
            return stage
    assert isinstance(sb, Stage)
    head = f"{b.name} cannot stream rows from {a.name} in a cascade on {target.name}"
    if len(a.outputs) != 1:
        return Refusal("multiple_consumers", f"{head}: {a.name} writes {len(a.outputs)} values")
    producer = nodes[a.nodes[-1]]
    value = next(o for o in producer.outputs if o is not None and o.name == a.outputs[0])
    if value.is_graph_output():
        return Refusal("graph_output", f"{head}: '{value.name}' is a graph output")
    first = nodes[b.nodes[0]]
    readers = value.consumers()
    if any(r is not first for r in readers) or (
        first.op_type in WINDOWED and first.inputs[0] is not value
    ):
        return Refusal(
            "multiple_consumers",
            f"{head}: '{value.name}' is read by {len(readers)} ops, not only by the data input of "
            f"{first.op_type} '{first.name}', so it must be stored whole",
        )
    width = (value.shape.dims[-1] if value.shape is not None and len(value.shape.dims) else None)
    narrow = target.fusion.cascade_min_width
    if narrow and isinstance(width, int) and width < narrow:
        return Refusal(
            "not_supported_by_target",
            f"{head}: '{value.name}' rows are {width} wide, below cascade_min_width = {narrow} "
            "(the target's row kernels lose to whole-tensor ones on rows that short)",
        )
    if set(sb.sides) - {value.name} and not target.fusion.cascade_residual:
        return Refusal(
            "not_supported_by_target",
            f"{head}: {b.name} reads a second activation row by row (a residual), and "
            f"cascade_residual = false",
        )
    return _Link(value)


class _Planner:
    """Live bytes of candidate cascades and the two dynamic programs of the module note."""

    def __init__(self, model, base, target, stages, links) -> None:  # noqa: ANN001
        self.model = model
        self.kernels = base.kernels
        self.nodes = {n.name: n for n in model.graph}
        self.caps = target.fusion
        self.target = target
        self.stages = stages
        self.links = links
        lives = _lifetimes.live_ranges(model, base)
        # the buffers greedy-inplace would place layer by layer (an in-place output shares its
        # input's bytes); a value whose buffer it shares with no other leaves the arena when it
        # becomes a ring
        buffers = _inplace.merged_buffers(lives, _inplace.inplace_aliases(model, base, lives))
        # a buffer leaves the arena when every value sharing it becomes a ring (Conv -> in-place
        # Swish -> Conv: the Conv's output and the Swish written over it are one buffer), for
        # float and int8 alike (int8 MobileNetV3 was off only by a host compiler's wrong code,
        # opfuse/backends/c/int8/requant.py)
        self.buffer_of = {m: b for b in buffers for m in b.members}
        steps = len(base.kernels) + 1
        # born[j]: bytes of buffers first written at step <= j; dead[i]: bytes last read before i,
        # so the buffers live at some step of [i, j] weigh born[j] - dead[i] (O(1) per segment)
        born, dead = [0] * steps, [0] * (steps + 1)
        for b in buffers:
            born[b.first] += b.size
            dead[b.last + 1] += b.size
        for k in range(1, steps):
            born[k] += born[k - 1]
        for k in range(1, steps + 1):
            dead[k] += dead[k - 1]
        self.born, self.dead = born, dead
        self.max_members = 4 * self.caps.cascade_max_anchors

    def rings(self, i: int, j: int) -> tuple[RingBuffer, ...] | None:
        """Ring buffers of the cascade k[i..j], or None when one would be the whole tensor."""
        windows = [self.stages[m].window for m in range(i, j + 1)]  # type: ignore[union-attr]
        values = [self.links[m].value for m in range(i, j)]  # type: ignore[union-attr]
        first = rows_of(chain_input(self.kernels[i], self.nodes))
        last = self.nodes[self.kernels[j].nodes[-1]].outputs[0]
        heights = [first or rows_of(values[0]) or 1] + [rows_of(v) or 1 for v in values]
        heights.append(rows_of(last) or 1)
        bands = ring_rows(windows, heights, self.caps.cascade_band_rows)
        rings = []
        for value, rows, height in zip(values, bands.ring, heights[1:-1], strict=True):
            if rows >= height:
                return None
            rings.append(RingBuffer(value.name, rows, height, _lifetimes.value_bytes(value) // height))
        return tuple(rings)

    def feasible(self, i: int, j: int) -> bool:
        if j - i + 1 > self.max_members:
            return False
        if any(not isinstance(self.links[m], _Link) for m in range(i, j)):
            return False
        anchors = sum(self.stages[m].anchors for m in range(i, j + 1))  # type: ignore[union-attr]
        return anchors <= self.caps.cascade_max_anchors

    def live(self, i: int, j: int) -> float:
        """Proxy of the arena at the step of cascade k[i..j] (inf when it cannot be one)."""
        rings: tuple[RingBuffer, ...] = ()
        if i < j:
            if not self.feasible(i, j):
                return float("inf")
            found = self.rings(i, j)
            if found is None:
                return float("inf")
            rings = found
        ringed = {r.value for r in rings}
        freed = {id(b): b for r in rings if (b := self.buffer_of.get(r.value)) is not None}
        total = self.born[j] - self.dead[i] - sum(
            b.size for b in freed.values() if ringed.issuperset(b.members))
        return total + sum(_lifetimes.align(r.nbytes) for r in rings)

    def runs(self) -> list[tuple[int, int]]:
        runs, start = [], 0
        for m, link in enumerate(self.links):
            if not isinstance(link, _Link):
                runs.append((start, m))
                start = m + 1
        runs.append((start, len(self.kernels) - 1))
        return runs

    def cut(self) -> list[tuple[int, int]]:
        runs = self.runs()
        self._live: dict[tuple[int, int], float] = {}
        peak = max(self._best_max(a, b) for a, b in runs)
        self.peak = peak
        layered = max((self._cost(k, k) for k in range(len(self.kernels))), default=0.0)
        self.pays = peak < layered or self.caps.cascade_same_arena
        if not self.pays:  # no cascade lowers the arena: streaming would only add per-band work
            self.peak = layered
            return [(k, k) for k in range(len(self.kernels))]
        segments: list[tuple[int, int]] = []
        for a, b in runs:
            segments.extend(self._fewest(a, b, peak))
        return segments

    def _cost(self, i: int, j: int) -> float:
        key = (i, j)
        if key not in self._live:
            self._live[key] = self.live(i, j)
        return self._live[key]

    def _starts(self, a: int, j: int) -> range:
        """Where a segment ending at j may start: no further back than the member limit."""
        return range(max(a, j - self.max_members + 1), j + 1)

    def _best_max(self, a: int, b: int) -> float:
        best = {a - 1: 0.0}
        for j in range(a, b + 1):
            best[j] = min(max(best[i - 1], self._cost(i, j)) for i in self._starts(a, j))
        return best[b]

    def _fewest(self, a: int, b: int, budget: float) -> list[tuple[int, int]]:
        # state per prefix end: (segments, max live, start of its last segment)
        state: dict[int, tuple[int, float, int]] = {a - 1: (0, 0.0, a)}
        for j in range(a, b + 1):
            options = []
            for i in self._starts(a, j):
                cost = self._cost(i, j)
                if cost > budget and i < j:
                    continue
                count, worst, _ = state[i - 1]
                options.append((count + 1, max(worst, cost), i))
            state[j] = min(options)
        segments = []
        j = b
        while j >= a:
            i = state[j][2]
            segments.append((i, j))
            j = i - 1
        return segments[::-1]

    def cut_reasons(self, segments: list[tuple[int, int]]) -> dict[int, Refusal]:
        """Why each linked edge between two chosen segments stays cut (edge index = left kernel)."""
        reasons: dict[int, Refusal] = {}
        for (i, m), (_, j) in zip(segments, segments[1:], strict=False):
            if not isinstance(self.links[m], _Link):
                continue
            a, b = self.kernels[m], self.kernels[m + 1]
            head = f"{b.name} does not stream rows from {a.name} in a cascade on {self.target.name}"
            anchors = sum(self.stages[x].anchors for x in range(i, j + 1))  # type: ignore[union-attr]
            if j - i + 1 > self.max_members:
                reasons[m] = Refusal(
                    "cascade_limit",
                    f"{head}: joined, the cascade would hold {j - i + 1} kernels (at most "
                    f"4 x cascade_max_anchors = {self.max_members})",
                )
                continue
            if anchors > self.caps.cascade_max_anchors:
                reasons[m] = Refusal(
                    "cascade_limit",
                    f"{head}: joined, the cascade would hold {anchors} anchors "
                    f"(cascade_max_anchors = {self.caps.cascade_max_anchors})",
                )
                continue
            if self.rings(i, j) is None:
                reasons[m] = Refusal(
                    "cascade_no_gain",
                    f"{head}: a ring buffer would need every row of the tensor it replaces",
                )
                continue
            live = self._cost(i, j)
            if not self.pays:
                reasons[m] = Refusal(
                    "cascade_no_gain",
                    f"{head}: no cascade lowers the peak arena below the layer-by-layer "
                    f"{int(self.peak):,} bytes, so streaming rows would only add per-band work",
                )
                continue
            reasons[m] = Refusal(
                "cascade_no_gain",
                f"{head}: joined, {int(live):,} bytes would be live at once, above the "
                f"{int(self.peak):,} the cut keeps (a cascade holds its input and output whole)",
            )
        return reasons

    def build(self, i: int, j: int, name: str) -> Kernel:
        members = self.kernels[i : j + 1]
        rings = self.rings(i, j)
        assert rings is not None
        inner = {r.value for r in rings}
        inputs: dict[str, None] = {}
        for member in members:
            for value in member.inputs:
                if value not in inner:
                    inputs.setdefault(value, None)
        return Kernel(
            name=name,
            nodes=tuple(n for m in members for n in m.nodes),
            ops=tuple(op for m in members for op in m.ops),
            inputs=tuple(inputs),
            outputs=members[-1].outputs,
            members=tuple(members),
            band_rows=self.caps.cascade_band_rows,
            ring_buffers=rings,
        )


def _decisions(base: Partition, segments: list[tuple[int, int]]) -> tuple[Decision, ...]:
    """The layer-by-layer decisions minus those of edges now inside a cascade."""
    owner = {n: k for k, kernel in enumerate(base.kernels) for n in kernel.nodes}
    segment = {k: s for s, (i, j) in enumerate(segments) for k in range(i, j + 1)}
    return tuple(
        d for d in base.decisions
        if not (d.producer in owner and d.consumer in owner
                and segment[owner[d.producer]] == segment[owner[d.consumer]])
    )  # fmt: skip


def _cascade_decisions(
    kernels: tuple[Kernel, ...],
    nodes: dict[str, ir.Node],
    segments: list[tuple[int, int]],
    refusals: dict[int, Refusal],
) -> tuple[Decision, ...]:
    """One decision per data edge between neighbouring kernels that no cascade joins."""
    out: list[Decision] = []
    for (_, m), _next in zip(segments, segments[1:], strict=False):
        refusal = refusals.get(m)
        if refusal is None:
            continue
        tip = nodes[kernels[m].nodes[-1]]
        made = {id(o) for o in tip.outputs if o is not None}
        for name in kernels[m + 1].nodes:
            node = nodes[name]
            if any(v is not None and id(v) in made for v in node.inputs):
                out.append(Decision(tip.name, node.name, False, refusal.reason, refusal.message))
                break
    return tuple(out)
