"""Gather: an embedding lookup (rows of a table picked by run-time indices) and an index select
(constant indices on any axis, e.g. a transformer's class token ``x[:, 0]``), docs/architecture.md
("Transformer ops in C").

``Y[o, i, c] = X[o, idx[i], c]`` with ``o`` over the dims before ``axis``, ``i`` over the indices
and ``c`` over the dims after it, so every pick copies one contiguous run of ``inner`` elements.
Negative indices count from the end of the axis (ONNX). Constant indices are checked here, at
generation time: one out of range is the model's error (OpfuseError, exit 2, naming the node).
Run-time indices cannot be: onnxruntime fails such a run, and the C must not read outside the
table, so an index out of range is clamped to the nearest row and the kernel sets
``opfuse_status`` to ``OPFUSE_ERROR_INDEX``, which ``opfuse_model_invoke`` returns (files.py
documents the status in model.h and the README).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, const, dims, who
from opfuse.backends.c.ctype import FLOAT, INT32, INT64, ctype_of
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError

# The status a kernel reports for a run-time index outside its axis (model.h defines it)
INDEX_ERROR = "OPFUSE_ERROR_INDEX"


def constant_indices(node: ir.Node, size: int) -> np.ndarray | None:
    """The node's constant indices made non-negative, or None for run-time indices; an index
    outside ``[-size, size)`` is refused with the node's name."""
    raw = const(node.inputs[1])
    if raw is None:
        return None
    flat = np.asarray(raw).astype(np.int64).ravel()
    bad = flat[(flat < -size) | (flat >= size)]
    if bad.size:
        raise OpfuseError(
            f"{who(node)}: index {int(bad[0])} is out of range for axis {attr(node, 'axis', 0)} "
            f"of size {size} (valid: {-size} to {size - 1})")
    return flat % size


def emit_gather(w: CWriter, node: ir.Node, params: Params) -> None:
    data_v, idx_v, out_v = node.inputs[0], node.inputs[1], node.outputs[0]
    ds = dims(data_v, node)
    if not ds:
        raise OpfuseError(f"C backend: {who(node)}: Gather of a scalar")
    axis = int(attr(node, "axis", 0)) % len(ds)
    outer, size, inner = math.prod(ds[:axis]), ds[axis], math.prod(ds[axis + 1 :])
    count = math.prod(dims(idx_v, node))
    ct = ctype_of(data_v) or FLOAT
    x = params.inp(data_v, node, ct if const(data_v) is not None else None)
    y = params.out(out_v, node)
    picks = constant_indices(node, size)
    w.open(f"for (int o = 0; o < {outer}; ++o)")
    if picks is not None and count == 1:
        w(f"const {ct.name} *xr = {x} + (o*{size} + {int(picks[0])})*{inner};")
        w(f"for (int c = 0; c < {inner}; ++c) {y}[o*{inner} + c] = xr[c];")
        w.close()
        return
    w.open(f"for (int i = 0; i < {count}; ++i)")
    if picks is not None:
        table = ", ".join(str(int(v)) for v in picks)
        w(f"static const int32_t pick[{count}] = {{{table}}};")
        w("const long long j = pick[i];")
    else:
        ict = ctype_of(idx_v)
        if ict not in (INT64, INT32):
            raise OpfuseError(f"C backend: {who(node)}: its indices must be int64 or int32")
        idx = params.inp(idx_v, node)
        w(f"long long j = (long long){idx}[i];")
        w(f"if (j < 0) j += {size};")
        w(f"if (j < 0 || j >= {size}) {{ opfuse_status = {INDEX_ERROR}; "
          f"j = j < 0 ? 0 : {size - 1}; }}")
    w(f"const {ct.name} *xr = {x} + (o*{size} + j)*{inner};")
    w(f"{ct.name} *yr = {y} + (o*{count} + i)*{inner};")
    w(f"for (int c = 0; c < {inner}; ++c) yr[c] = xr[c];")
    w.close()
    w.close()
