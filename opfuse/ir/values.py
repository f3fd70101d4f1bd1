"""What a stage asks of one value: its static dims and its constant contents. One helper for each,
with one contract, so that the stages cannot disagree on what "static" or "constant" means
(docs/architecture.md, "Pipeline: one stage per package, data flowing one way")."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir


def static_dims(value: ir.Value | None) -> tuple[int, ...] | None:
    """The dims of ``value`` as ints; None when there is no value (an omitted input), its shape is
    unknown, or a dim is symbolic."""
    if value is None or value.shape is None:
        return None
    dims = tuple(value.shape)
    return dims if all(isinstance(d, int) for d in dims) else None  # type: ignore[return-value]


def const(value: ir.Value | None) -> np.ndarray | None:
    """The constant contents of ``value``: an initializer's, or a standard ``Constant`` node's
    (any of its value attributes); None when there is no value or it is computed at run time."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    p = value.producer()
    if p is None or p.op_type != "Constant" or p.domain not in ("", "ai.onnx"):
        return None
    t = p.attributes.get("value")
    if t is not None:
        return t.value.numpy()
    for key in ("value_float", "value_int"):
        a = p.attributes.get(key)
        if a is not None:
            return np.array(a.value)
    for key in ("value_floats", "value_ints"):
        a = p.attributes.get(key)
        if a is not None:
            return np.array(list(a.value))
    return None


def clamp_bounds(nodes: list[ir.Node]) -> list[tuple[float | None, float | None]] | None:
    """The (low, high) bounds of a chain of Relu / Clip ``nodes`` (each reading the one before;
    None: no bound), or None when one is another op or a Clip whose bound is not a constant
    scalar (an input, opset 11 on, or an attribute before). The C backend writes these clamps in
    vectors and the cost prices the kernel that does (kernelplan.convf.depthwise_vectors): both
    ask this, so they cannot disagree on which epilogues qualify."""
    out: list[tuple[float | None, float | None]] = []
    for node in nodes:
        if node.op_type == "Relu":
            out.append((0.0, None))
            continue
        if node.op_type != "Clip":
            return None
        bounds: list[float | None] = []
        for i, name in ((1, "min"), (2, "max")):
            if i < len(node.inputs) and node.inputs[i] is not None:
                arr = const(node.inputs[i])
                if arr is None or np.asarray(arr).size != 1:
                    return None
                bounds.append(float(np.asarray(arr).reshape(-1)[0]))
            else:
                a = node.attributes.get(name)
                bounds.append(None if a is None else float(a.as_float()))
        out.append((bounds[0], bounds[1]))
    return out
