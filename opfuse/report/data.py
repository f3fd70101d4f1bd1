"""Everything the HTML report shows, gathered into one JSON-ready dict. No figure is computed here:
the numbers come from ``opfuse.analysis`` (cost model) and ``opfuse.memory`` (arena plans); this
module only collects them with the graph's structure and its layout."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnx_ir as ir

import opfuse
from opfuse.fusion import REASONS, Partition
from opfuse.ir.provenance import source_map
from opfuse.memory import MemoryPlan
from opfuse.report.layout import layout_kernels
from opfuse.schedule import Kernel, cascade_json

if TYPE_CHECKING:
    from opfuse.analysis import Analysis
    from opfuse.compiled import CompileResult


def consumers_of(model: ir.Model) -> dict[str, list[str]]:
    """Value name -> names of the nodes that read it."""
    out: dict[str, list[str]] = {}
    for node in model.graph:
        for value in node.inputs:
            if value is not None:
                out.setdefault(value.name, []).append(node.name)
    return out


def graph_data(model: ir.Model, part: Partition) -> dict[str, Any]:
    """Nodes (with their kernel), edges (internal, refused with a reason, or plain), the layout."""
    consumers = consumers_of(model)
    owner = {n: i for i, k in enumerate(part.kernels) for n in k.nodes}
    refused = {(d.producer, d.consumer): d for d in part.decisions if not d.fused}
    sources = source_map(model)
    producer: dict[str, str] = {}
    nodes = []
    for node in model.graph:
        for out in node.outputs:
            producer[out.name] = node.name
        srcs = sources.get(node.name, [node.name])
        nodes.append(
            {
                "name": node.name,
                "op": node.op_type,
                "kernel": owner.get(node.name, -1),
                "sources": [s for s in srcs if s != node.name],
                "shape": _shape(node.outputs[0]) if node.outputs else "",
            }
        )
    edges = []
    for node in model.graph:
        for value in node.inputs:
            if value is None or value.name not in producer:
                continue
            src = producer[value.name]
            kind, reason, message = "cross", "", ""
            if owner.get(src) == owner.get(node.name):
                kind = "internal"
            elif (src, node.name) in refused:
                d = refused[(src, node.name)]
                kind, reason, message = "refused", d.reason, d.message
            edges.append(
                {
                    "src": src,
                    "dst": node.name,
                    "value": value.name,
                    "kind": kind,
                    "reason": reason,
                    "message": message,
                }
            )
    kernels = [
        {"name": k.name, "nodes": list(k.nodes), "ops": list(k.ops)}
        | (cascade_json(k) | {"member_rows": _member_rows(k)} if k.is_cascade else {})
        for k in part.kernels
    ]
    return {
        "nodes": nodes,
        "edges": edges,
        "kernels": kernels,
        "inputs": [v.name for v in model.graph.inputs],
        "outputs": [v.name for v in model.graph.outputs],
        "layout": layout_kernels(part, consumers),
    }


def _member_rows(kernel: Kernel) -> list[list[int]]:
    """Per member of a cascade, its first and last row in the kernel's node list (the graph view
    boxes each member inside the cascade's box)."""
    at = {n: i for i, n in enumerate(kernel.nodes)}
    return [[min(at[n] for n in m.nodes), max(at[n] for n in m.nodes)] for m in kernel.members]


def _shape(value: ir.Value) -> str:
    shape = value.shape
    return "x".join(str(d) for d in shape) if shape is not None else "?"


def plan_data(plan: MemoryPlan, steps: int) -> dict[str, Any]:
    """A memory plan as compact rows: [name, offset, size, first, last, kind]."""
    return {
        "planner": plan.planner,
        "peak_bytes": plan.peak_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
        "steps": steps,
        "aliases": dict(plan.aliases),
        "tensors": [
            [t.name, plan.offsets[t.name], t.size_bytes, t.first, t.last, t.kind]
            for t in plan.tensors
        ],
    }


def roofs(result: CompileResult) -> dict[str, Any]:
    """The target's ceilings: peak FLOP/s per precision, read bandwidth per memory level."""
    perf = result.target.perf
    if perf is None:
        return {"peaks": {}, "levels": [], "ram_bytes": 0, "dispatch_s": 0.0}
    return {
        "peaks": {p: 2.0 * r for p, r in perf.peak_macs_per_s.items()},
        "levels": [
            {
                "name": m.name,
                "read_bytes_per_s": m.read_bytes_per_s,
                "write_bytes_per_s": m.write_bytes_per_s,
                "size_bytes": m.size_bytes,
                "holds": list(m.holds),
            }
            for m in perf.memory
        ],
        "ram_bytes": perf.ram_bytes,
        "dispatch_s": perf.dispatch_overhead_s,
    }


def report_data(result: CompileResult, analysis: Analysis) -> dict[str, Any]:
    """What the report page shows, for ``render_report``."""
    from opfuse.report.figures import before_kernels, levels, memory_plans
    from opfuse.report.refusals import ranked_refusals
    from opfuse.report.verdict import verdict_lines

    summary = analysis.to_json()
    part = result.partition if analysis.cascades else result.partition.without_cascades()
    plan_before, plan_after = memory_plans(analysis)
    return {
        "version": opfuse.__version__,
        "source": result.source,
        "target_description": result.target.description,
        "analysis": summary,
        "before_kernels": before_kernels(analysis),
        "levels": levels(analysis),
        "graph": graph_data(result.optimized, part),
        "original_nodes": len(list(result.original.graph)),
        "memory": {
            "before": plan_data(plan_before, len(result.before.kernels)),
            "after": plan_data(plan_after, len(part.kernels)),
        },
        "roofs": roofs(result),
        "reasons": dict(REASONS),
        "verdict": verdict_lines(summary),
        "refusals": ranked_refusals(result, analysis.precision, part),
    }
