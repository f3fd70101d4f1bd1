"""The float cost's depthwise band copy (opfuse.cost.fwork) against the C that runs: where the ISA
writes a depthwise conv's rows in vectors read in place (x86-host: ``Isa.depthwise_rows``,
``IsaKernels.depthwise_float``), the cost counts no band copy; where only the portable C runs
(cortex-a76, the portable ISA) a wide-row conv still copies its rows into a band and the cost
still counts it. Both read one plan (``kernelplan.convf.depthwise_vectors``): each case compares
the emitted C of the depthwise conv's kernel (vector rows, band core) with the work the cost
counts for that kernel, layer by layer and as a cascade member, so the test fails when either side stops following the plan."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c.emit import c_schedule, emit_c
from opfuse.backends.c.epilogue import clamps
from opfuse.cost.fwork import conv_geom, float_kernel_work
from opfuse.kernelplan import convf
from opfuse.pipeline import compile_model
from tests.helpers.cascade import streaming
from tests.helpers.chain_graph import ChainGraph

VECTORS = "_mm512_fmadd_ps(vw0, "  # the x86 rows' first tap (isa/x86/floatdw.py)
BAND = re.compile(r"float xp\[\d+\] OPFUSE_ALIGNED;")  # the band core's input rows

CASES = {  # name: (map side, depthwise conv, its epilogue)
    "wide_rows_clip": (40, {"k": (3, 3), "pads": (1, 1, 1, 1)}, "clip"),
    "wide_rows_stride2_relu": (70, {"k": (3, 3), "pads": (1, 1, 1, 1), "s": 2}, "relu"),
    "seven_by_seven_clip": (21, {"k": (7, 7), "pads": (3, 3, 3, 3)}, "clip"),
    "wide_rows_residual_add": (40, {"k": (3, 3), "pads": (1, 1, 1, 1)}, "add"),
}


def _source(tmp_path: Path, name: str) -> Path:
    """1x1, Relu, the depthwise conv, its epilogue (Clip, Relu or + the 1x1's output), 1x1."""
    size, dw, tail = CASES[name]
    g = ChainGraph(6, size, size)
    first = g.conv(12, (1, 1))
    g.op("Relu")
    g.conv(12, group=12, **dw)
    if tail == "clip":
        g.op("Clip", g.const("lo", np.array(0.0)), g.const("hi", np.array(6.0)))
    elif tail == "relu":
        g.op("Relu")
    else:
        g.op("Add", first)
    g.conv(6, (1, 1))
    return g.save(tmp_path / "block.onnx")


def _depthwise(tmp_path: Path, name: str, target: str,
               cascades: bool) -> tuple[bool, bool, bool, bool]:
    """(the plan's vectors, the C's vector rows, the C's band core, the cost's band copy) of the
    depthwise conv on ``target``: its layer-by-layer kernel or (``cascades``) cascade member."""
    result = compile_model(str(_source(tmp_path, name)),
                           streaming(target, cascade_band_rows=1) if cascades else target)
    folder = tmp_path / f"{target}_{cascades}"
    emit_c(result, folder, cascades=cascades)
    text = (folder / "model.c").read_text()
    sched = c_schedule(result, cascades=cascades)
    nodes = {n.name: n for n in sched.model.graph}
    isa = result.target.isa
    parts = [(k.is_cascade, [nodes[n] for n in m.nodes if n in nodes])
             for k in sched.partition.kernels for m in (k.members if k.is_cascade else [k])]
    assert any(member for member, _ in parts) == cascades, "the block does not stream"
    for member, members in parts:
        anchor = next((n for n in members if n.op_type == "Conv"), None)
        g = conv_geom(anchor) if anchor is not None else None
        if g is None or g.icg != 1 or g.ocg != 1:
            continue
        work = float_kernel_work(members, isa.scalar, member, rows=isa.depthwise_rows)
        steps = clamps([n for n in members if n is not anchor])  # as the emitter reads them
        plan = convf.plan_convf(g, isa.scalar, member, rows=isa.depthwise_rows,
                                clamps=steps is not None)
        return (plan.vectors, VECTORS in text, bool(BAND.search(text)),
                any(w.path == "band" for w in work))
    raise AssertionError("no depthwise kernel")


@pytest.mark.parametrize("cascades", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_band_copy_costed_as_the_c_runs(name: str, cascades: bool, tmp_path: Path) -> None:
    vectors, c_vectors, c_band, cost_band = _depthwise(tmp_path, name, "x86-host", cascades)
    assert vectors == c_vectors == (CASES[name][2] != "add")  # clamps alone: the vector rows
    # the rows in vectors read in place: the band core only in their #else, no copy costed
    assert cost_band == (c_band and not c_vectors)
    vectors, c_vectors, c_band, cost_band = _depthwise(tmp_path, name, "cortex-a76", cascades)
    assert not vectors and not c_vectors  # the portable ISA: no rows in vectors
    assert c_band and cost_band  # wide rows on a vector unit: the band, copied and costed
