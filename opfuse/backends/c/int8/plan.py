"""An int8 conv node as the kernel plan sees it (opfuse/kernelplan/conv8.py): the emitters,
the cascade members and the support predicates ask the plan, as the cost model does."""

from __future__ import annotations

import onnx_ir as ir

from opfuse.backends.c.cgen import attr, dims
from opfuse.kernelplan.conv8 import Conv8, ConvGeom, ConvPlan, is_depthwise, plan_conv8


def pads_end(node: ir.Node) -> list[int]:
    """A conv's end pads as its attribute gives them (none: empty)."""
    pads = attr(node, "pads")
    return list(pads[len(pads) // 2 :]) if pads else []


def conv8_of(g: ConvGeom, node: ir.Node, xct: str) -> Conv8:
    """``g`` (the backend's geometry of ``node``), with its end pads and input type."""
    end = pads_end(node)
    ends = (end[-2], end[-1]) if len(end) >= 2 else (0, end[-1] if end else 0)
    return Conv8(g, ends, xct == "int8_t", len(dims(node.outputs[0], node)))


def conv8_plan(g: ConvGeom, node: ir.Node, xct: str, member: bool = False) -> ConvPlan:
    """The plan of ``node`` (``member``: as a cascade member)."""
    return plan_conv8(conv8_of(g, node, xct), member)


def is_depthwise8(g: ConvGeom, node: ir.Node, xct: str) -> bool:
    """Whether the depthwise SIMD-pairs kernel (int8/depthwise_dsp.py) writes this conv."""
    return is_depthwise(conv8_of(g, node, xct))
