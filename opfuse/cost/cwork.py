"""The work of one int8 kernel as opfuse's generated C does it (docs/architecture.md, the cost row),
for the ``host`` target's int8 figures (``[perf.int8c]``, ``opfuse.cost.int8c``).

A MAC count alone misprices the int8 C by up to 3x across layer shapes: its templates
(``opfuse.backends.c.int8.conv``) vectorize one loop and pay for whole vectors, and they
requantize every output on its own. So a kernel's work is counted in three parts, as its template
loops:

- ``lane_macs``: multiply-accumulates in whole vectors of ``LANES`` int32 lanes along the loop
  the compiler vectorizes: the output channels of a group (the channel-lanes path: short rows, or a
  pointwise plane under one pixel tile), the pixel tiles of a pointwise conv, the output row of any
  other conv (a depthwise conv's too), the K reduction of a Gemm/MatMul. A 6x6 pointwise plane is
  36 pixels, 3 vectors of 16 = 48 lanes: 4/3 of its MACs;
- ``outputs``: output elements, each requantized (int32 -> int8: a 64-bit multiply, a rounding
  shift, a clamp) and run through the fused epilogue;
- ``loops``: the template's innermost loop nests started (one per output row and channel block,
  per pixel tile, per output pixel of the channel-lanes path, per Gemm output): the loop set-up,
  the border windows and the accumulator initialisation that do not scale with the MACs.

Kernels without an anchor (pools, elementwise, softmax, movement) count their output elements
only, with ``lane_macs`` = their FLOPs (the cost model's count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx_ir as ir

from opfuse import ops

# The int8 C's template constants (opfuse.backends.c.int8.conv), mirrored here so the cost model
# does not import a backend; tests/test_int8c.py checks they still agree.
OCB_CHOICES = (8, 4, 2, 1)
PIX_TILE = 64
LANES = 16
SHORT_ROW = 32


@dataclass(frozen=True)
class Work:
    lane_macs: float
    outputs: int
    loops: int

    def __add__(self, other: Work) -> Work:
        return Work(self.lane_macs + other.lane_macs, self.outputs + other.outputs,
                    self.loops + other.loops)


def _lanes(n: int) -> int:
    """``n`` rounded up to whole vectors."""
    return -(-n // LANES) * LANES


def _dims(value: ir.Value | None) -> list[int] | None:
    if value is None or value.shape is None:
        return None
    try:
        return [int(d) for d in value.shape]
    except (TypeError, ValueError):
        return None


def _ints(node: ir.Node, name: str, default: list[int]) -> list[int]:
    a = node.attributes.get(name)
    return list(a.as_ints()) if a is not None else default


def conv_work(node: ir.Node) -> Work | None:
    """A Conv's work as ``emit_conv8`` loops (module docstring); None when shapes are unknown."""
    xs, ws, ys = _dims(node.inputs[0]), _dims(node.inputs[1]), _dims(node.outputs[0])
    if xs is None or ws is None or ys is None or len(ys) not in (3, 4):
        return None
    if len(ys) == 3:
        xs, ws, ys = [*xs[:2], 1, xs[2]], [*ws[:2], 1, ws[2]], [*ys[:2], 1, ys[2]]
    n, oc, oh, ow = ys
    icg, kh, kw = ws[1], ws[2], ws[3]
    a = node.attributes.get("group")
    group = a.as_int() if a is not None else 1
    ocg = oc // max(group, 1)
    taps = kh * kw
    pads = _ints(node, "pads", [0, 0, 0, 0])
    strides = _ints(node, "strides", [1, 1])
    pointwise = (kh, kw) == (1, 1) and all(s == 1 for s in strides) and not any(pads)
    lanes = ocg % LANES == 0 and (oh * ow < PIX_TILE if pointwise else ow < SHORT_ROW)
    pixels = oh * ow
    if lanes:  # one output pixel at a time, a vector over the group's output channels
        return Work(n * group * pixels * icg * taps * _lanes(ocg), n * oc * pixels,
                    n * group * pixels)
    ocb = next(b for b in OCB_CHOICES if ocg % b == 0)
    blocks = n * group * (ocg // ocb)
    if pointwise:  # pixel tiles of PIX_TILE, each a vector loop over its pixels
        tile = min(PIX_TILE, pixels)
        full, rest = divmod(pixels, tile)
        width = full * _lanes(tile) + (_lanes(rest) if rest else 0)
        return Work(blocks * ocb * icg * width, n * oc * pixels,
                    blocks * (full + (1 if rest else 0)))
    # one output row at a time, a vector loop over the row per tap
    return Work(blocks * ocb * oh * icg * taps * _lanes(ow), n * oc * pixels, blocks * oh)


def gemm_work(node: ir.Node) -> Work | None:
    """Gemm/MatMul as ``emit_gemm8``: per output, one dot product over K (vectorized)."""
    a, y = _dims(node.inputs[0]), _dims(node.outputs[0])
    if a is None or y is None or not y:
        return None
    k = a[-1]
    outputs = math.prod(y)
    return Work(outputs * _lanes(k), outputs, outputs)


def node_work(node: ir.Node) -> Work:
    """One node's work (module docstring)."""
    found = None
    if node.op_type == "Conv":
        found = conv_work(node)
    elif node.op_type in ("Gemm", "MatMul"):
        found = gemm_work(node)
    if found is not None:
        return found
    out = _dims(node.outputs[0]) if node.outputs else None
    outputs = math.prod(out) if out is not None else 0
    return Work(float(ops.flops(node)), outputs, 0)


def kernel_work(members: list[ir.Node]) -> Work:
    """A kernel's work: its anchor's (its epilogue rides on the anchor's outputs), else the sum of
    its members' (an unanchored chain of elementwise ops runs one loop per member)."""
    anchor = next((n for n in members if ops.is_anchor(n)), None)
    if anchor is not None:
        return node_work(anchor)
    total = Work(0.0, 0, 0)
    for node in members:
        total = total + node_work(node)
    return total


VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def is_view(members: list[ir.Node]) -> bool:
    """A kernel of views only: the C's memory plan puts its output on its input, no code runs."""
    return bool(members) and all(n.op_type in VIEWS for n in members)
