"""Compute time of one kernel of opfuse's generated int8 C, on a target with ``[perf.int8c]``
(the ``host`` after ``opfuse calibrate``; ``opfuse.targets.int8c``; docs/architecture.md, the cost
row). It replaces FLOPs / (int8 peak x efficiency) for quantized models there, since onnxruntime's
int8 kernels (what the peak and efficiencies were measured on) and opfuse's C differ by up to 10x:

    compute = sum over the kernel's loops of lane_macs x mac_s[path] + tail_macs x tail_s[path]
              + outputs x output_s[path] + loops x loop_s[path]

with the work and its template path counted as the C loops (``opfuse.cost.cwork``). A fused Relu
or Clip becomes the requantization's clamp and costs nothing more (after an anchor, or after an
elementwise op such as a residual Add); a fused Add requantizes both operands per output, at the
``epilogue`` path's rates. A kernel of views only runs no code (0).
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.cost.cwork import Work, is_view, kernel_work
from opfuse.cost.kclass import kernel_class
from opfuse.kernelplan.conv8 import has_gemv8
from opfuse.kernelplan.dw8 import has_dw8
from opfuse.quant import ONNX, ROUNDING
from opfuse.targets import Perf, Target
from opfuse.targets.int8c import FALLBACK_PATH


def work_seconds(work: Work, perf: Perf, fallback_class: str) -> float:
    """One item of work at its path's rates (a path the table lacks: its ``FALLBACK_PATH``'s; an
    absent mac_s: the int8 peak at the class's onnxruntime efficiency)."""
    assert perf.int8c is not None
    return table_seconds(work, perf.int8c, FALLBACK_PATH,
                         perf.peak_macs_per_s["int8"] * perf.efficiency_of(fallback_class))


def table_seconds(work: Work, model, fallback: dict[str, str], peak_mac_s: float) -> float:  # noqa: ANN001
    """``work`` at a fitted table's per-path rates (``[perf.int8c]``, ``[perf.floatc]``): a path
    the table lacks takes ``fallback``'s; an absent mac_s, ``peak_mac_s``."""
    path = work.path
    if not fitted(model, path):
        path = fallback.get(path, path)
    mac_s = model.mac_s.get(path)
    if mac_s is None:
        mac_s = 1.0 / peak_mac_s
    return (work.lane_macs * mac_s
            + work.tail_macs * model.tail_s.get(path, 0.0)
            + work.outputs * model.output_s.get(path, 0.0)
            + work.loops * model.loop_s.get(path, 0.0))


def fitted(table, path: str) -> bool:  # noqa: ANN001
    """A fitted table (``[perf.int8c]``, ``[perf.floatc]``) has rates of ``path``."""
    return any(path in t for t in (table.mac_s, table.output_s, table.loop_s))


def _runs(model: ir.Model, target: Target, path: str, isa_writes: bool) -> bool:
    """The ISA writes ``path``'s kernels (``isa_writes``), under TFLite's rounding (they
    requantize in vectors), and ``target``'s ``[perf.int8c]`` has the path's rates (a host
    calibrated before counts them on the portable C's path, as then)."""
    table = target.perf.int8c if target.perf is not None else None
    return (table is not None and isa_writes and model.meta.get(ROUNDING) != ONNX
            and fitted(table, path))


def runs_gemv(model: ir.Model, target: Target) -> bool:
    """``model``'s batch-1 fully connected layers are priced as the GEMV on ``target``
    (kernelplan/conv8.has_gemv8, x86/conv.emit_gemm_x86; ``_runs``), not as gemms."""
    return _runs(model, target, "gemv", has_gemv8(target.isa.name))


def runs_dw(model: ir.Model, target: Target) -> bool:
    """``model``'s int8 depthwise convs are priced as x86/depthwise*.py's vectors of pixels on
    ``target`` (kernelplan/dw8.has_dw8; ``_runs``), not as the portable C's SIMD pairs."""
    return _runs(model, target, "depthwise_zmm", has_dw8(target.isa.name))


def compute_s(members: list[ir.Node], perf: Perf, gemv: bool = False, dw: bool = False) -> float:
    """The kernel's compute time (module docstring); ``perf.int8c`` must be set; ``gemv``,
    ``dw``: ``runs_gemv``'s and ``runs_dw``'s answers for the model."""
    if not members or is_view(members):
        return 0.0
    klass = kernel_class(members)
    return sum(work_seconds(w, perf, klass) for w in kernel_work(members, gemv, dw))
