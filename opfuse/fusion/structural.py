"""Structural and dtype constraints: refusals no target file changes (docs/architecture.md,
"Named constraints"), in the order they run."""

from __future__ import annotations

from opfuse.fusion.constraints import DTYPE, STRUCTURAL, Edge, Fields, constraint
from opfuse.fusion.rules import CONVERSIONS, dims_of, int_name, who
from opfuse.ops import OPS, OpKind, kind


@constraint(STRUCTURAL, "opaque_op",
            "{node} is {what}, so it runs as its own kernel")
def constraint_known_ops(e: Edge) -> Fields | None:
    node = next((n for n in (e.p, e.v) if kind(n) == OpKind.OPAQUE), None)
    if node is None:
        return None
    known = node.domain in ("", "ai.onnx") and node.op_type in OPS
    what = "a recurrence over its whole sequence" if known else "an op opfuse does not know"
    if node.op_type == "If" and node.domain in ("", "ai.onnx"):
        what = ("control flow whose branch is chosen at run time (--input-value on the inputs "
                "its condition reads folds it)")
    return {"node": who(node), "what": what}


@constraint(STRUCTURAL, "graph_output", "'{value}' is a graph output and must be stored")
def constraint_not_graph_output(e: Edge) -> Fields | None:
    out = next((o for o in e.p.outputs if o is not None and o.is_graph_output()), None)
    return None if out is None else {"value": out.name}


@constraint(STRUCTURAL, "multiple_consumers",
            "'{value}' is read by {readers} nodes, so it must be stored (opfuse does not "
            "recompute producers)")
def constraint_one_consumer(e: Edge) -> Fields | None:
    for out in (o for o in e.p.outputs if o is not None):
        readers = out.consumers()
        if any(r is not e.v for r in readers):
            return {"value": out.name, "readers": len(readers)}
    return None


@constraint(DTYPE, "dtype_mismatch",
            "{node} converts between float and {integer}, so it runs as its own kernel")
def constraint_no_conversion(e: Edge) -> Fields | None:
    for node in (e.p, e.v):
        if node.op_type in CONVERSIONS and node.domain in ("", "ai.onnx"):
            return {"node": who(node), "integer": int_name(node)}
    return None


@constraint(DTYPE, "dtype_mismatch", "{producer} produces {dtype} but {consumer} produces {out}")
def constraint_one_dtype(e: Edge) -> Fields | None:
    out_v = e.v.outputs[0] if e.v.outputs else None
    if out_v is None or e.x.dtype is None or out_v.dtype is None or e.x.dtype == out_v.dtype:
        return None
    return {"dtype": e.x.dtype.name, "out": out_v.dtype.name}


@constraint(STRUCTURAL, "layout_change",
            "{op} moves data (a layout change), so it runs as its own kernel")
def constraint_no_data_movement(e: Edge) -> Fields | None:
    node = next((n for n in (e.p, e.v) if kind(n) == OpKind.INJECTIVE), None)
    return None if node is None else {"op": node.op_type}


@constraint(STRUCTURAL, "dynamic_shape", "'{value}' has a dynamic shape {dims}")
def constraint_static_shapes(e: Edge) -> Fields | None:
    for value in (e.x, e.v.outputs[0] if e.v.outputs else None):
        dims = dims_of(value)
        if dims is not None and any(not isinstance(d, int) for d in dims):
            return {"value": value.name, "dims": dims}
    return None


STRUCTURE = (
    constraint_known_ops,
    constraint_not_graph_output,
    constraint_one_consumer,
    constraint_no_conversion,
    constraint_one_dtype,
    constraint_no_data_movement,
    constraint_static_shapes,
)
