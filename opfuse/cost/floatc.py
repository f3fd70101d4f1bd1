"""Compute time of one kernel of opfuse's generated float C, on a target with ``[perf.floatc]``
(the Cortex-M targets, written by ``benchmarks/mcu_calibrate.py --float``;
``opfuse.targets.int8c``'s schema keyed by ``FLOAT_PATHS``; docs/architecture.md, the cost row).
It replaces FLOPs / (fp32 peak x efficiency) for float models there, which priced a scalar FPU's
conv as one multiply-add a cycle and missed its loads, loop set-up and stores by 2.4-2.9x:

    compute = sum over the kernel's loops of lane_macs x mac_s[path] + tail_macs x tail_s[path]
              + outputs x output_s[path] + loops x loop_s[path]

with the work and its path counted as the C loops (``opfuse.cost.fwork``, which reads the float
conv plan of ``opfuse.kernelplan.convf``). A path the table lacks takes the rates of
``FLOAT_FALLBACK``'s path; an absent mac_s, the fp32 peak at the class's efficiency. A kernel of
views only runs no code (0). A cascade is priced member by member (the caller sums them).
"""

from __future__ import annotations

import onnx_ir as ir

from opfuse.cost.cwork import Work, is_view
from opfuse.cost.fwork import float_kernel_work
from opfuse.cost.int8c import table_seconds
from opfuse.cost.kclass import kernel_class
from opfuse.targets import Perf
from opfuse.targets.int8c import FLOAT_FALLBACK


def work_seconds(work: Work, perf: Perf, fallback_class: str) -> float:
    """One item of work at its path's rates (module docstring; int8c.table_seconds)."""
    assert perf.floatc is not None
    return table_seconds(work, perf.floatc, FLOAT_FALLBACK,
                         perf.peak_macs_per_s["fp32"] * perf.efficiency_of(fallback_class))


def compute_s(members: list[ir.Node], perf: Perf, scalar: bool, member: bool = False,
              rows: bool = False) -> float:
    """The compute time of a kernel (or of one cascade member: ``member``) made of ``members``;
    ``perf.floatc`` must be set; ``scalar``: the target's FPU has no vectors (``Isa.scalar``);
    ``rows``: its ISA writes depthwise rows in vectors (``Isa.depthwise_rows``)."""
    if not members or is_view(members):
        return 0.0
    klass = kernel_class(members)
    return sum(work_seconds(w, perf, klass) for w in float_kernel_work(members, scalar, member, rows))
