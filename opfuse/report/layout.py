"""A layered layout of the kernel graph for the report's graph view (computed here, drawn in JS).

Kernels are the layout's units: each is a box with its nodes stacked inside, in schedule order.
A kernel's layer is its longest-path depth from the graph inputs (kernels come in topological
order, so one forward sweep computes it); inside a layer, kernels are ordered by the mean column of
their producers (the barycenter heuristic of Sugiyama-style layouts), then centred. An edge that
skips layers (a residual connection) is routed down a vertical lane right of the boxes it passes,
lanes assigned greedily so that overlapping skips never share one.
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.schedule import Partition

BOX_W = 300  # px, a kernel box
ROW_H = 20  # px, one node row inside a box
HEAD_H = 20  # px, the kernel's title row
PAD = 6
GAP_X = 36
GAP_Y = 34
LANE_GAP = 12


@dataclass(frozen=True)
class KernelEdge:
    src: int  # kernel index
    dst: int


def kernel_edges(partition: Partition, consumers: dict[str, list[str]]) -> list[KernelEdge]:
    """Kernel -> kernel edges: some output of ``src`` is read by a node of ``dst``."""
    owner = {n: i for i, k in enumerate(partition.kernels) for n in k.nodes}
    seen: set[tuple[int, int]] = set()
    out: list[KernelEdge] = []
    for i, kernel in enumerate(partition.kernels):
        for value in kernel.outputs:
            for node in consumers.get(value, []):
                j = owner.get(node)
                if j is not None and j != i and (i, j) not in seen:
                    seen.add((i, j))
                    out.append(KernelEdge(i, j))
    return out


def layout_kernels(partition: Partition, consumers: dict[str, list[str]]) -> dict:
    """Box positions (x, y, w, h per kernel), lanes for long edges, and the canvas size."""
    kernels = partition.kernels
    edges = kernel_edges(partition, consumers)
    preds: dict[int, list[int]] = {i: [] for i in range(len(kernels))}
    for e in edges:
        preds[e.dst].append(e.src)
    layer = [0] * len(kernels)
    for i in range(len(kernels)):
        layer[i] = max((layer[p] + 1 for p in preds[i] if p < i), default=0)
    layers: dict[int, list[int]] = {}
    for i, depth in enumerate(layer):
        layers.setdefault(depth, []).append(i)
    column: dict[int, float] = {}
    for depth in sorted(layers):
        members = layers[depth]
        keys = {}
        for idx, i in enumerate(members):
            ps = [column[p] for p in preds[i] if p in column]
            keys[i] = (sum(ps) / len(ps) if ps else float(idx), idx)
        members.sort(key=keys.__getitem__)
        for pos, i in enumerate(members):
            column[i] = pos - (len(members) - 1) / 2
    height = [HEAD_H + ROW_H * len(k.nodes) + PAD for k in kernels]
    min_col = min(column.values(), default=0.0)
    boxes: list[dict] = [{} for _ in kernels]
    y = 10
    for depth in sorted(layers):
        tallest = max(height[i] for i in layers[depth])
        for i in layers[depth]:
            x = 10 + (column[i] - min_col) * (BOX_W + GAP_X)
            boxes[i] = {"x": round(x, 1), "y": y, "w": BOX_W, "h": height[i], "layer": depth}
        y += tallest + GAP_Y
    right = max((b["x"] + b["w"] for b in boxes), default=0)
    lanes = _lanes(edges, layer, boxes)
    lane_count = max(lanes.values(), default=-1) + 1
    return {
        "boxes": boxes,
        "lanes": {
            f"{e.src}>{e.dst}": lanes[(e.src, e.dst)] for e in edges if (e.src, e.dst) in lanes
        },
        "lane_x0": right + 14,
        "lane_gap": LANE_GAP,
        "row_h": ROW_H,
        "head_h": HEAD_H,
        "width": right + 24 + lane_count * LANE_GAP,
        "height": y,
    }


def _lanes(
    edges: list[KernelEdge], layer: list[int], boxes: list[dict]
) -> dict[tuple[int, int], int]:
    """Greedy interval colouring of the edges that skip at least one layer."""
    long = sorted(
        (e for e in edges if layer[e.dst] - layer[e.src] > 1),
        key=lambda e: (boxes[e.src]["y"], boxes[e.dst]["y"]),
    )
    busy_until: list[float] = []  # per lane, the y where its last edge ends
    out: dict[tuple[int, int], int] = {}
    for e in long:
        top, bottom = boxes[e.src]["y"], boxes[e.dst]["y"] + boxes[e.dst]["h"]
        lane = next((i for i, end in enumerate(busy_until) if end < top), len(busy_until))
        if lane == len(busy_until):
            busy_until.append(bottom)
        else:
            busy_until[lane] = bottom
        out[(e.src, e.dst)] = lane
    return out
