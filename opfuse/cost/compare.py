"""Our cost model beside Vela's, per layer and in total (``analyze --compare vela``).

Layers are matched by the TFLite operator they come from: the TFLite frontend names each imported
node ``op<index>_<Op>`` and rewrites keep that name in the node's provenance
(``opfuse.ir.provenance``); Vela's per-layer CSV names each operator by its output tensor, which
the ``.tflite`` maps back to the operator's index. One row is a smallest set of our kernels and
Vela's layers that share TFLite operators (usually one kernel and one operator; a fused
Conv + separate activation is one kernel for two operators). A kernel with no TFLite operator left
(a layout transpose at the boundary) or a Vela layer whose operator opfuse folded away is a row of
its own, so the totals are the sums of the rows on both sides.

SRAM per row: Vela's "Staging Usage" (bytes live at that NPU operation) against the bytes of our
planned arena live while the row's kernels run. The totals: Vela's "Total SRAM used" against our
planned arena. An operator Vela leaves to the CPU (the QUANTIZE of a float input) is outside its
cycles and its SRAM, so the error and the "on the NPU" arena compare the rows it runs itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from opfuse.cost.vela import VelaLayer, VelaRun
from opfuse.memory.inplace import merged_buffers

_OP_INDEX = re.compile(r"^op(\d+)_")


@dataclass(frozen=True)
class CompareRow:
    kernels: tuple[str, ...]  # our kernels
    vela_layers: tuple[str, ...]  # Vela's operators (TFLite op names, e.g. Conv2D)
    tflite_ops: tuple[int, ...]
    opfuse_s: float
    vela_cycles: int
    vela_s: float
    opfuse_live_bytes: int
    vela_staging_bytes: int
    vela_passes: int
    vela_cpu: bool = False  # Vela leaves (part of) it to the CPU: outside its cycles and SRAM

    @property
    def error(self) -> float | None:
        """(opfuse - Vela) / Vela; None when Vela spends no cycles on the row."""
        return (self.opfuse_s - self.vela_s) / self.vela_s if self.vela_s > 0 else None

    def to_json(self) -> dict:
        return {"kernels": list(self.kernels), "vela_layers": list(self.vela_layers),
                "tflite_ops": list(self.tflite_ops), "opfuse_s": self.opfuse_s,
                "vela_cycles": self.vela_cycles, "vela_s": self.vela_s, "error": self.error,
                "opfuse_live_bytes": self.opfuse_live_bytes,
                "vela_staging_bytes": self.vela_staging_bytes, "vela_passes": self.vela_passes,
                "vela_cpu": self.vela_cpu}


@dataclass(frozen=True)
class Comparison:
    model: str
    target: str
    vela_config: dict[str, str]
    rows: tuple[CompareRow, ...]
    opfuse_s: float  # sum of the rows
    vela_s: float  # sum of the rows (Vela's per-layer cycles / its clock)
    vela_summary_s: float  # Vela's own network total ("inference_time")
    opfuse_arena_bytes: int
    vela_sram_bytes: int  # Vela's "Total SRAM used"
    opfuse_kernels: int
    vela_passes: int  # Vela's passes after fusing (its summary; CPU operators count too)
    # the same figures over the rows Vela runs on its NPU (what its time and SRAM cover)
    opfuse_npu_s: float = 0.0
    opfuse_npu_arena_bytes: int = 0
    vela_npu_passes: int = 0  # NPU operations of the operators Vela runs on its NPU

    @property
    def error(self) -> float | None:
        """Ours against Vela's on what Vela's total covers: the rows it runs on the NPU; None
        when Vela's total is 0 (a float model: Vela runs nothing on the NPU)."""
        if not self.vela_summary_s > 0:
            return None
        return (self.opfuse_npu_s - self.vela_summary_s) / self.vela_summary_s

    @property
    def nothing_on_npu(self) -> bool:
        """Vela leaves every operator it lists to the CPU (a float model)."""
        listed = [r for r in self.rows if r.vela_layers]
        return bool(listed) and all(r.vela_cpu for r in listed)

    def to_json(self) -> dict:
        return {"model": self.model, "target": self.target, "vela_config": dict(self.vela_config),
                "rows": [r.to_json() for r in self.rows],
                "total": {"opfuse_s": self.opfuse_s, "vela_s": self.vela_s,
                          "vela_summary_s": self.vela_summary_s, "error": self.error,
                          "opfuse_arena_bytes": self.opfuse_arena_bytes,
                          "vela_sram_bytes": self.vela_sram_bytes,
                          "opfuse_kernels": self.opfuse_kernels, "vela_passes": self.vela_passes,
                          "opfuse_npu_s": self.opfuse_npu_s,
                          "opfuse_npu_arena_bytes": self.opfuse_npu_arena_bytes,
                          "vela_npu_passes": self.vela_npu_passes,
                          "nothing_on_npu": self.nothing_on_npu}}


def _find(parent: dict, x):  # noqa: ANN001, ANN202 (union-find over hashable keys)
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _layer_ops(layers: tuple[VelaLayer, ...], op_outputs: dict[str, int]) -> dict[int, int | None]:
    """The TFLite operator of each Vela layer: by its name; an NPU operation Vela added while
    lowering an operator (named after an intermediate tensor, ``<input>_softmax_12``) belongs to
    the nearest named layer of the same operator in its run (the run ends with the operator's
    output), else to the longest operator output its name extends."""
    found: dict[int, int | None] = {j: op_outputs.get(layer.name) for j, layer in enumerate(layers)}
    for j, layer in enumerate(layers):
        if found[j] is not None:
            continue
        k = j
        while k + 1 < len(layers) and layers[k + 1].operator == layer.operator and found[k] is None:
            k += 1
        if found[k] is None:
            k = j
            while k > 0 and layers[k - 1].operator == layer.operator and found[k] is None:
                k -= 1
        if found[k] is not None and layers[k].operator == layer.operator:
            found[j] = found[k]
            continue
        best = max((n for n in op_outputs if layer.name.startswith(n)), key=len, default=None)
        found[j] = op_outputs[best] if best is not None else None
    return found


def _live_by_step(plan) -> list[int]:  # noqa: ANN001 (MemoryPlan)
    buffers = merged_buffers(plan.tensors, plan.aliases)
    steps = max((b.last for b in buffers), default=-1) + 1
    live = [0] * max(steps, 1)
    for b in buffers:
        for s in range(max(b.first, 0), b.last + 1):
            live[s] += b.size
    return live


def compare(analysis, sources: dict[str, list[str]], op_outputs: dict[str, int],  # noqa: ANN001
            vela: VelaRun, vela_config: dict[str, str]) -> Comparison:
    """Rows and totals of ``analysis`` (after fusion) against ``vela`` (module docstring).

    ``sources``: node name -> imported node names (``opfuse.ir.provenance.source_map`` of the
    optimized model); ``op_outputs``: TFLite output tensor name -> operator index.
    """
    side = analysis.after
    kernels = side.cost.kernels
    clock = vela.summary.clock_hz
    parent: dict = {}
    kernel_ops: dict[int, set[int]] = {}
    for i, k in enumerate(kernels):
        parent[("k", i)] = ("k", i)
        ops: set[int] = set()
        for node in k.nodes:
            for src in sources.get(node, [node]):
                m = _OP_INDEX.match(src)
                if m:
                    ops.add(int(m.group(1)))
        kernel_ops[i] = ops
    layer_op = _layer_ops(vela.layers, op_outputs)
    for j in layer_op:
        parent[("v", j)] = ("v", j)
    by_op: dict[int, tuple] = {}
    for key in [("k", i) for i in kernel_ops] + [("v", j) for j in layer_op]:
        ops = kernel_ops[key[1]] if key[0] == "k" else {layer_op[key[1]]} - {None}
        for op in ops:
            if op in by_op:
                parent[_find(parent, key)] = _find(parent, by_op[op])
            else:
                by_op[op] = key
    groups: dict = {}
    for key in parent:
        groups.setdefault(_find(parent, key), []).append(key)
    live = _live_by_step(side.plan)
    rows = []
    for members in groups.values():
        ks = sorted(i for t, i in members if t == "k")
        vs = sorted(j for t, j in members if t == "v")
        layers: list[VelaLayer] = [vela.layers[j] for j in vs]
        cycles = sum(layer.cycles for layer in layers)
        ops = sorted(set().union(*(kernel_ops[i] for i in ks), {layer_op[j] for j in vs} - {None}))
        rows.append(CompareRow(
            kernels=tuple(kernels[i].name for i in ks),
            vela_layers=tuple(dict.fromkeys(layer.operator for layer in layers)),
            tflite_ops=tuple(ops),
            opfuse_s=sum(kernels[i].latency_s for i in ks),
            vela_cycles=cycles,
            vela_s=cycles / clock,
            opfuse_live_bytes=max((live[i] for i in ks if i < len(live)), default=0),
            vela_staging_bytes=max((layer.staging_bytes for layer in layers), default=0),
            vela_passes=sum(layer.passes for layer in layers),
            vela_cpu=any(not layer.on_npu for layer in layers),
        ))
    rows.sort(key=lambda r: (min(r.tflite_ops) if r.tflite_ops else -1, r.kernels))
    return Comparison(
        model=analysis.model,
        target=analysis.target,
        vela_config=dict(vela_config),
        rows=tuple(rows),
        opfuse_s=sum(r.opfuse_s for r in rows),
        vela_s=sum(r.vela_s for r in rows),
        vela_summary_s=vela.summary.inference_s,
        opfuse_arena_bytes=side.plan.peak_bytes,
        vela_sram_bytes=vela.summary.sram_bytes,
        opfuse_kernels=len(kernels),
        vela_passes=vela.summary.passes,
        opfuse_npu_s=sum(r.opfuse_s for r in rows if not r.vela_cpu),
        opfuse_npu_arena_bytes=max((r.opfuse_live_bytes for r in rows if not r.vela_cpu), default=0),
        vela_npu_passes=sum(layer.passes for layer in vela.layers if layer.on_npu),
    )


def tflite_op_outputs(path: str) -> dict[str, int]:
    """Output tensor name -> operator index of a ``.tflite`` (how Vela names its layers)."""
    from opfuse.frontends.tflite.reader import read_tflite_file

    model = read_tflite_file(path)
    found: dict[str, int] = {}
    for op in model.operators:
        for t in op.outputs:
            if t >= 0:
                found.setdefault(model.tensors[t].name, op.index)
    return found
