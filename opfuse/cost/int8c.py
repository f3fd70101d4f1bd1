"""Compute time of one kernel of opfuse's generated int8 C, on a target with ``[perf.int8c]``
(the ``host`` after ``opfuse calibrate``; ``opfuse.targets.int8c``; docs/architecture.md, the cost
row). It replaces FLOPs / (int8 peak x efficiency) for quantized models there, since onnxruntime's
int8 kernels (what the peak was measured on) and opfuse's C differ by up to 10x per class:

    compute = lane_macs / (int8 peak x efficiency[class]) + outputs x output_s[class]
              + loops x loop_s[class] + each fused non-clamp epilogue op at the elementwise figures

with the work counted as the C templates loop (``opfuse.cost.cwork``). A fused Relu or Clip
becomes the requantization's clamp and costs nothing more; a fused Add requantizes both operands
and is priced as a standalone int8 Add. A kernel of views only runs no code (0).
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse import ops
from opfuse.cost.cwork import Work, is_view, kernel_work, node_work
from opfuse.cost.kclass import kernel_class
from opfuse.targets import Perf

CLAMPS = frozenset({"Relu", "Clip"})  # folded into the requantization's clamp


def _seconds(work: Work, klass: str, perf: Perf) -> float:
    model = perf.int8c
    assert model is not None
    eff = model.efficiency.get(klass, perf.efficiency_of(klass))
    return (work.lane_macs / (perf.peak_macs_per_s["int8"] * eff)
            + work.outputs * model.output_s.get(klass, 0.0)
            + work.loops * model.loop_s.get(klass, 0.0))


def compute_s(members: list[ir.Node], perf: Perf) -> float:
    """The kernel's compute time (module docstring); ``perf.int8c`` must be set."""
    if not members or is_view(members):
        return 0.0
    anchor = next((n for n in members if ops.is_anchor(n)), None)
    if anchor is None:
        return _seconds(kernel_work(members), kernel_class(members), perf)
    total = _seconds(kernel_work(members), kernel_class(members), perf)
    for node in members:
        if node is not anchor and node.op_type not in CLAMPS and not is_view([node]):
            total += _seconds(node_work(node), "elementwise", perf)
    return total
