"""What the explorer's memory lane shows: which operators write their output to memory (the
target's activation level, DRAM on npu-generic, axi_sram on cortex-m7), and how many elements.

Unfused, every operator is a kernel and writes each of its outputs. Fused, only a kernel's outputs
(``Kernel.outputs``: read by a later kernel or a graph output) are written; each is drawn under the
imported operator that produced it (the last of the operators a rewritten node stands for). The
page multiplies elements by the precision's element size, as the cost model counts traffic.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse.compiled import CompileResult
from opfuse.ir.provenance import sources_of
from opfuse.schedule import Partition


def _elements(value: ir.Value | None) -> int:
    shape = None if value is None else value.shape
    if shape is None or not shape.is_static():
        return 0
    return math.prod(int(d) for d in shape)


def op_elements(nodes: list[ir.Node]) -> list[int]:
    """Elements each imported operator outputs (what it writes when it is its own kernel)."""
    return [sum(_elements(v) for v in node.outputs) for node in nodes]


def written(result: CompileResult, partition: Partition, index: dict[str, int]) -> dict[int, int]:
    """Imported operator index -> elements it writes to memory under ``partition``."""
    producers = {v.name: node for node in result.optimized.graph for v in node.outputs}
    out: dict[int, int] = {}
    for kernel in partition.kernels:
        for name in kernel.outputs:
            node = producers.get(name)
            if node is None:
                continue
            members = [index[s] for s in sources_of(node) if s in index]
            if not members:
                continue
            value = next(v for v in node.outputs if v.name == name)
            at = max(members)
            out[at] = out.get(at, 0) + _elements(value)
    return out


def lanes(result: CompileResult, index: dict[str, int]) -> dict[str, dict[int, int]]:
    """The fused lanes of one compile: ``on`` (the partition analyze reports) and, when it has
    cascades, ``layer`` (layer by layer)."""
    out = {"on": written(result, result.partition, index)}
    if result.partition.cascades:
        out["layer"] = written(result, result.partition.without_cascades(), index)
    return out
