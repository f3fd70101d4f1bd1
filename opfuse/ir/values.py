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
