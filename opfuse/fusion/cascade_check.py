"""The cascades' last test: the arena plan, not the cut's proxy (docs/architecture.md, "Cascades").

``cascade.py`` cuts runs into cascades against a proxy of the arena (the bytes live at each step).
The planner then places real buffers, with alignment and the holes the placement leaves, and its
peak can come out above the layer-by-layer plan's (MediaPipe's face detector on cortex-m7: 1,317,888
bytes with 13 cascades, 1,310,720 without). A cascade costs time (bands, halo rows) that only a
lower peak pays for, so when the plan with cascades does not peak below the plan without, every
cascade is split back into its kernels and each edge it held says why, with both figures.
"""

from __future__ import annotations

from dataclasses import replace

import onnx_ir as ir

from opfuse.schedule import Decision, Kernel, Partition


def keep_if_lower(model: ir.Model, part: Partition, peak_with: int, peak_without: int,
                  same_arena: bool = False) -> Partition:
    """``part``, or its layer-by-layer base when the cascades do not lower the planned peak
    (``same_arena``: the target streams bands at no cost, so an equal peak keeps them)."""
    if not part.cascades or peak_with < peak_without or (same_arena and peak_with == peak_without):
        return part
    base = part.without_cascades()
    message = (f"with its cascades the arena plan peaks at {peak_with:,} bytes, not below the "
               f"{peak_without:,} bytes of layer by layer, so no cascade is kept")
    nodes = {n.name: n for n in model.graph}
    declined = tuple(d for k in part.cascades for d in _edges(k, nodes, message))
    return replace(base, cascade_decisions=part.cascade_decisions + declined)


def _edges(cascade: Kernel, nodes: dict[str, ir.Node], message: str) -> list[Decision]:
    """One decision per data edge between neighbouring members of ``cascade``."""
    out = []
    for a, b in zip(cascade.members, cascade.members[1:], strict=False):
        tip = nodes[a.nodes[-1]]
        made = {id(o) for o in tip.outputs if o is not None}
        reader = next((nodes[n] for n in b.nodes
                       if any(v is not None and id(v) in made for v in nodes[n].inputs)), None)
        if reader is not None:
            out.append(Decision(tip.name, reader.name, False, "cascade_no_gain", message))
    return out
