"""A vector unit's float depthwise convs onto narrow rows read their rows in place
(``kernelplan/convf.depthwise_in_place``: at a horizontal stride > 1 onto at most
``STRIDED_ROW`` columns, at stride 1 onto at most ``NARROW_ROW``; the row nest of dwrow.py, the
band core elsewhere), layer by layer and as cascade members: the x86-host C, built for this host
(``-march=native``), against onnxruntime, with the plan's choice read from the generated C.
Geometries: stride 2 padded at the end (TFLite's SAME on an even map), a dilated 5x5 at stride 2
with padding on every side unequal, a 3x3 onto three columns, and a stride-1 conv on wider rows
that keeps the band."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from opfuse.kernelplan import convf
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.measure.validate.c_float import validate_c
from opfuse.pipeline import compile_model
from tests.helpers.cascade import streaming
from tests.helpers.chain_graph import ChainGraph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

# the in-place row's tap-row pointers (dwrow.row_pointers), which the band core has not
IN_PLACE_ROWS = re.compile(r"const float \*r0 = \(unsigned\)\(ih0 \+ 0\) < \d+u \? ")
BAND = re.compile(r"float xp\[\d+\] OPFUSE_ALIGNED;")


def _block(size: int, dw: dict) -> ChainGraph:
    """1x1, Relu, the depthwise conv ``dw``, Clip, 1x1 (MobileNetV2's block) on a square map."""
    g = ChainGraph(6, size, size)
    g.conv(12, (1, 1))
    g.op("Relu")
    g.conv(12, group=12, **dw)
    g.op("Clip", g.const("lo", np.array(0.0)), g.const("hi", np.array(6.0)))
    g.conv(6, (1, 1))
    return g


GRAPHS = {  # name: (map side, depthwise conv, in place on a vector unit)
    "stride2_end_pad": (12, {"k": (3, 3), "pads": (0, 0, 1, 1), "s": 2}, True),  # 12 -> 6
    "stride2_dilated_asymmetric": (11, {"k": (5, 5), "pads": (3, 2, 4, 1), "s": 2, "d": 2},
                                   True),  # 11 -> 5 rows, 3 columns
    "three_columns": (3, {"k": (3, 3), "pads": (1, 1, 1, 1)}, True),
    "wide_rows_banded": (10, {"k": (3, 3), "pads": (1, 1, 1, 1)}, False),
}


@pytest.mark.parametrize("cascades", [False, True])
@pytest.mark.parametrize("name", list(GRAPHS))
def test_narrow_depthwise_matches_onnxruntime(name: str, cascades: bool, tmp_path: Path) -> None:
    size, dw, placed = GRAPHS[name]
    source = _block(size, dw).save(tmp_path / "block.onnx")
    result = compile_model(str(source), streaming("x86-host", cascade_band_rows=1))
    report = validate_c(result, outdir=tmp_path / "c", cascades=cascades)
    assert report.ok, report
    text = (tmp_path / "c" / "model.c").read_text()
    if cascades:
        assert "ring" in text, "the block does not stream"
    assert bool(IN_PLACE_ROWS.search(text)) == placed
    assert bool(BAND.search(text)) != placed


@pytest.mark.parametrize(("ow", "stride", "placed"), [
    (6, 2, True), (7, 2, False), (3, 1, True), (4, 1, False),
])
def test_vector_unit_reads_only_narrow_rows_in_place(ow: int, stride: int, placed: bool) -> None:
    g = ConvGeom(1, 8, 2 * ow, 2 * ow, 8, ow, ow, 8, (3, 3), (stride, stride), (1, 1), (1, 1))
    assert convf.depthwise_in_place(g, scalar=False) == placed
    assert convf.depthwise_in_place(g, scalar=True)  # a scalar FPU: always
