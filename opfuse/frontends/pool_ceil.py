"""Pools with ``ceil_mode = 1`` whose last window would start in the end padding.

ONNX's operator spec before opset 22 (and onnx's shape inference for those opsets) counts that
window; onnxruntime, PyTorch and the opset-22 spec drop it: ``if (out - 1) * stride >= n + begin:
out -= 1``. A model exported at opset 11..21 then has an inferred shape one larger than what every
runtime computes (on a 5-wide input, kernel 2, stride 2, pads 1: 4 by inference, 3 by onnxruntime),
and a C built to the inferred shape disagrees with its own reference.

The pool is rewritten, before inference, with its end padding trimmed to where the last kept
window ends, so that the spec's formula gives the runtimes' count. The windows that remain read
exactly what they read before (none reaches past the trimmed end), so MaxPool, AveragePool with or
without ``count_include_pad`` and LpPool compute the same values.
"""

from __future__ import annotations

import math

import onnx

from opfuse.errors import OpfuseError

POOLS = ("MaxPool", "AveragePool", "LpPool")  # the ONNX schemas with ceil_mode


def _attr(node: onnx.NodeProto, name: str) -> onnx.AttributeProto | None:
    return next((a for a in node.attribute if a.name == name), None)


def _ints(node: onnx.NodeProto, name: str, default: list[int]) -> list[int]:
    a = _attr(node, name)
    return list(a.ints) if a is not None and a.ints else default


def runtime_extent(n: int, begin: int, end: int, extent: int, stride: int) -> tuple[int, int]:
    """(the spec's ceil count before opset 22, the count runtimes compute) along one axis."""
    spec = math.ceil((n + begin + end - extent) / stride) + 1
    return spec, spec - 1 if (spec - 1) * stride >= n + begin else spec


def trim_end_pads(proto: onnx.ModelProto, values: dict[str, tuple[tuple[int, ...], int]],
                  where: str) -> bool:
    """Trim the end pads of every top-graph pool whose last ceil window starts in the padding,
    given the inferred ``values`` (name -> (dims, bytes)); True when a node changed."""
    changed = False
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in POOLS:
            continue
        ceil = _attr(node, "ceil_mode")
        auto = _attr(node, "auto_pad")
        if ceil is None or ceil.i != 1 or (auto is not None and auto.s not in (b"", b"NOTSET")):
            continue
        x = values.get(node.input[0]) if node.input else None
        kernel = _ints(node, "kernel_shape", [])
        if x is None or not kernel or len(x[0]) != len(kernel) + 2:
            continue
        rank = len(kernel)
        strides = _ints(node, "strides", [1] * rank)
        dilations = _ints(node, "dilations", [1] * rank)
        pads = _ints(node, "pads", [0] * 2 * rank)
        new = list(pads)
        for axis, n in enumerate(x[0][2:]):
            extent = (kernel[axis] - 1) * dilations[axis] + 1
            begin, end, s = pads[axis], pads[axis + rank], strides[axis]
            spec, runtime = runtime_extent(n, begin, end, extent, s)
            if spec == runtime:
                continue
            # the largest end pad whose ceil count is the runtimes' (windows start at k * s)
            new[axis + rank] = trimmed = min(end, (runtime - 1) * s + extent - n - begin)
            if trimmed < 0 or runtime_extent(n, begin, trimmed, extent, s)[0] != runtime:
                raise OpfuseError(f"{where}: node '{node.name or node.op_type}' ({node.op_type}): "
                                  f"ceil_mode window count on spatial axis {axis} cannot be "
                                  "matched to onnxruntime's")
        if new != pads:
            attr = _attr(node, "pads")
            if attr is None:
                node.attribute.append(onnx.helper.make_attribute("pads", new))
            else:
                del attr.ints[:]
                attr.ints.extend(new)
            changed = True
    return changed
