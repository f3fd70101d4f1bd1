"""Turn the recognised attention cores of a greedy partition into one kernel each.

The pattern, its algebra and why no cycle can appear are in ``attention.py``; this module only
moves nodes between kernels: each core's nodes leave the kernels that held them (what is left of
such a kernel is rebuilt from its remaining nodes), the core becomes a kernel named ``attention``
with its scratch row as a ring buffer, and kernels are ordered by their last node, as
``partition.py`` orders them. Decisions follow: an edge now inside a core needs none, an edge
that was fused and now enters or leaves a core gets one (docs/architecture.md, "Attention").
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from opfuse.fusion.attention import KERNEL_NAME, Core, match, scratch_rings
from opfuse.fusion.attention_checks import (
    AttentionCase,
    AttentionExit,
    check,
    constraint_attention_no_epilogue,
)
from opfuse.fusion.boundary import boundary
from opfuse.fusion.support import KernelSupport
from opfuse.schedule import Decision, Kernel, Partition
from opfuse.targets import Target


def fuse_attention(model: ir.Model, layers: Partition, target: Target,
                   support: KernelSupport) -> Partition:
    """``layers`` with every attention core that passes ``check`` as one kernel."""
    opset = int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 17)))
    cores: list[Core] = []
    refused: dict[tuple[str, str], Decision] = {}
    by_name = {n.name: n for n in model.graph}
    for node in model.graph:
        core = match(node) if node.op_type == "Softmax" else None
        if core is None:
            continue
        refusal = check(AttentionCase(core, target, support, opset, layers, by_name))
        if refusal is None:
            cores.append(core)
        else:
            edge = (core.softmax.name, core.pv.name)
            refused[edge] = Decision(*edge, False, refusal.reason, refusal.message)
    decisions = [refused.pop((d.producer, d.consumer), d) for d in layers.decisions]
    decisions.extend(refused.values())
    if not cores:
        return Partition(layers.target, layers.kernels, tuple(decisions))
    return _merge(model, layers, cores, decisions, target.isa.scalar)


def _merge(model: ir.Model, layers: Partition, cores: Sequence[Core],
           decisions: list[Decision], on_board: bool) -> Partition:
    by_name = {n.name: n for n in model.graph}
    index = {n.name: i for i, n in enumerate(model.graph)}
    core_of: dict[str, int] = {n.name: i for i, c in enumerate(cores) for n in c.nodes}
    taken = {k.name for k in layers.kernels}
    kernels: list[Kernel] = []
    for kernel in layers.kernels:
        rest = [n for n in kernel.nodes if n not in core_of]
        if len(rest) == len(kernel.nodes):
            kernels.append(kernel)
            continue
        taken.discard(kernel.name)
        if rest:  # a kernel that held some of a core's nodes keeps the others
            kernels.append(build_kernel([by_name[n] for n in rest], _base(rest, by_name), taken))
    for core in cores:
        members = sorted(core.nodes, key=lambda n: index[n.name])
        made = build_kernel(members, KERNEL_NAME, taken)
        kernels.append(Kernel(made.name, made.nodes, made.ops, made.inputs, made.outputs,
                              ring_buffers=scratch_rings(core, on_board)))
    kernels.sort(key=lambda k: index[k.nodes[-1]])
    kept = [d for d in decisions
            if not (d.producer in core_of and core_of.get(d.consumer) == core_of[d.producer])]
    kept.extend(_new_edges(cores, kept, core_of, layers))
    return Partition(layers.target, tuple(kernels), tuple(kept))


def _new_edges(cores: Sequence[Core], kept: list[Decision], core_of: dict[str, int],
               layers: Partition) -> list[Decision]:
    """Decisions for edges that were fused and now cross a core's boundary."""
    seen = {(d.producer, d.consumer) for d in kept}
    added: list[Decision] = []
    inside = frozenset(core_of)
    for i, core in enumerate(cores):
        for node in core.nodes:
            for value in node.inputs:
                p = value.producer() if value is not None else None
                if p is None or core_of.get(p.name) == i or (p.name, node.name) in seen:
                    continue
                seen.add((p.name, node.name))
                added.append(Decision(p.name, node.name, False, "other_producer_fused",
                                      f"{node.op_type} joined the attention kernel, which reads "
                                      f"'{value.name}' from memory"))
        last = core.out_transpose or core.pv
        for reader in core.output.consumers():
            refusal = constraint_attention_no_epilogue(AttentionExit(reader, inside, layers.target))
            if (last.name, reader.name) not in seen and refusal is not None:
                seen.add((last.name, reader.name))
                added.append(Decision(last.name, reader.name, False, refusal.reason,
                                      refusal.message))
    return added


def _base(names: Sequence[str], by_name: dict[str, ir.Node]) -> str:
    ops = [by_name[n].op_type.lower() for n in names]
    return ops[0] if len(ops) == 1 else "fused_" + "_".join(ops)


def build_kernel(members: Sequence[ir.Node], base: str, taken: set[str]) -> Kernel:
    """A kernel of ``members`` (in schedule order): what it reads from outside and what it writes
    that is read outside or is a graph output, named ``base`` or ``base_2``, ... not in ``taken``."""
    inputs, outputs = boundary(members)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return Kernel(name, tuple(n.name for n in members), tuple(n.op_type for n in members),
                  inputs, outputs)
