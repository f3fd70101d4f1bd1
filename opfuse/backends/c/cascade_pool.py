"""Float32 MaxPool / AveragePool as the first node of a cascade member (opfuse/backends/c/cascade.py).

Output row ``r`` of channel ``c`` into ``acc[W]`` through ``emit_pool_row``, the row core of the
layer-by-layer pool kernel (opfuse/backends/c/pools.py), reading its input rows from a ring
(``C x R x W``, row ``y`` at ``(c*R + y % R)*W``): the same window, padding (taps outside the input
are skipped), dilation, IEEE maximum and ``count_include_pad`` divisor, so a pool in a cascade
computes what the layer-by-layer kernel does. The member's epilogue then runs on ``acc``.
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims
from opfuse.backends.c.pools import emit_pool_row, pool_geom
from opfuse.backends.c.rowsource import ring_slot
from opfuse.ops import groups

POOLS = groups.POOLS


def why_not_pool(node: ir.Node) -> str | None:
    """None when ``pool_row`` can write ``node`` as a member's first node, else why not."""
    ks = attr(node, "kernel_shape")
    if ks is None or len(ks) != 2:
        return "not a 2-D pool"
    if int(attr(node, "ceil_mode", 0) or 0):
        return "ceil_mode (the row schedule assumes floor)"
    if node.op_type == "MaxPool" and len(node.outputs) > 1 and node.outputs[1] is not None:
        return "a MaxPool with an Indices output"
    return None


def pool_row(w: CWriter, node: ir.Node, xp: str, rx: int) -> None:
    """``acc[W]`` (declared by the caller) = output row ``r`` of channel ``c`` of the pool."""
    xs, ys = dims(node.inputs[0], node), dims(node.outputs[0], node)
    g = pool_geom(node, xs, ys)
    whole = rx == g.ih

    def load(ih: str) -> str:
        row = ih if whole else f"({ring_slot(ih, rx)})"
        w(f"const float (*src)[{g.iw}] = (const float (*)[{g.iw}])({xp} + (c*{rx} + {row})*{g.iw});")
        return "src"

    emit_pool_row(w, g, 1, "pacc", "r", load)
    w(f"for (int i = 0; i < {g.ow}; ++i) acc[i] = pacc[0][i];")
