"""In-place reuse: which kernel outputs may be written over an input that dies in that kernel.

A kernel qualifies when every member op is elementwise with the ``inplace`` flag (ELEMWISE or
BROADCAST in ops.OPS) or pure data movement that keeps row-major order (Reshape, Flatten, Squeeze,
Unsqueeze, Identity): output element i then depends on input element i only, so writing element i
over the input is safe. The overwritten input must have exactly the output's byte size, be read for
the last time by this kernel, and not be a graph output. Graph inputs may be overwritten by default
(TFLite Micro does the same: the caller fills them before each run); pass ``overwrite_inputs=False``
to keep them intact.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from opfuse.memory.lifetimes import INPUT, OUTPUT, TensorLife
from opfuse.memory.placement import Buffer
from opfuse.ops import OPS, OpKind, op_info
from opfuse.ops.groups import VIEWS
from opfuse.schedule import Kernel, Partition

DATA_MOVEMENT = VIEWS  # the op registry's views: their output may alias their input


def _op_in_place(node: ir.Node | None, op_type: str) -> bool:
    if node is not None and node.domain not in ("", "ai.onnx"):
        return False
    if op_type in DATA_MOVEMENT:
        return True
    info = op_info(node) if node is not None else OPS.get(op_type)
    return info is not None and info.inplace and info.kind in (OpKind.ELEMWISE, OpKind.BROADCAST)


def kernel_in_place(kernel: Kernel, nodes: dict[str, ir.Node]) -> bool:
    """Whether ``kernel`` may write its outputs over its inputs (see the module doc)."""
    return bool(kernel.ops) and all(
        _op_in_place(nodes.get(name), op) for name, op in zip(kernel.nodes, kernel.ops, strict=True)
    )


def inplace_aliases(
    model: ir.Model,
    partition: Partition,
    tensors: Sequence[TensorLife],
    overwrite_inputs: bool = True,
) -> dict[str, str]:
    """Output name -> the input name whose buffer it overwrites."""
    nodes = {node.name: node for node in model.graph if node.name}
    life = {t.name: t for t in tensors}
    aliases: dict[str, str] = {}
    taken: set[str] = set()
    for step, kernel in enumerate(partition.kernels):
        if not kernel_in_place(kernel, nodes):
            continue
        for out_name in kernel.outputs:
            out = life.get(out_name)
            if out is None or out.first != step:
                continue
            for in_name in kernel.inputs:
                src = life.get(in_name)
                if (
                    src is None
                    or in_name in taken
                    or src.last != step
                    or src.size_bytes != out.size_bytes
                    or src.kind == OUTPUT
                    or (src.kind == INPUT and not overwrite_inputs)
                ):
                    continue
                aliases[out_name] = in_name
                taken.add(in_name)
                break
    return aliases


def merged_buffers(tensors: Sequence[TensorLife], aliases: dict[str, str]) -> tuple[Buffer, ...]:
    """One buffer per alias chain (a tensor and everything written over it), else one per tensor.
    Chains are followed with path compression, so a 200k-op elementwise chain is linear, not
    quadratic (docs/architecture.md, "Outputs and limits")."""
    root = _alias_roots(aliases)
    groups: dict[str, list[TensorLife]] = {}
    for t in tensors:
        groups.setdefault(root.get(t.name, t.name), []).append(t)
    return tuple(
        Buffer(
            members=tuple(m.name for m in sorted(group, key=lambda m: m.first)),
            size=max(m.aligned_bytes for m in group),
            first=min(m.first for m in group),
            last=max(m.last for m in group),
        )
        for group in groups.values()
    )


def _alias_roots(aliases: dict[str, str]) -> dict[str, str]:
    """Each aliased name -> the tensor at the end of its chain (union-find's find with full path
    compression: every name on a walked path points at the root afterwards, so each edge is
    walked once). Aliases never form a cycle: a kernel only overwrites an input that is older."""
    root: dict[str, str] = {}
    for start in aliases:
        path = []
        name = start
        while name in aliases and name not in root:
            path.append(name)
            name = aliases[name]
        end = root.get(name, name)
        for member in path:
            root[member] = end
    return root
