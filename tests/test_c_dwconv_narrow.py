"""A vector unit's float depthwise convs (dwconv.py), layer by layer and as cascade members, on
x86-host against onnxruntime, built for this host (``-march=native``), for AVX2
(``-march=x86-64-v3``) and with the portable C alone (``-march=x86-64-v2``):

- the x86 module's rows in zmm (``-march=native`` on an AVX-512 host) or ymm registers
  (``-march=x86-64-v3``; ``isa/x86/floatdw.py``, ``IsaKernels.depthwise_float``: a clamps-only
  epilogue), the portable C in their ``#else``;
- the portable C's choice (``kernelplan/convf.depthwise_in_place``): narrow rows (at most
  ``STRIDED_ROW`` columns at a horizontal stride > 1, ``NARROW_ROW`` at stride 1) read in place
  by the row nest of dwrow.py, wider ones the band core.

Geometries: stride 2 padded at the end (TFLite's SAME on an even map), a dilated 5x5 at stride 2
with unequal padding on every side, a 3x3 onto three columns, wide rows at stride 1 and 2 (a
vector loop between the written-out ends), a 7x7, and a residual Add epilogue (no vectors)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c.emit import emit_c
from opfuse.kernelplan import convf
from opfuse.kernelplan.conv8 import ConvGeom
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model
from tests.helpers.cascade import streaming
from tests.helpers.chain_graph import ChainGraph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
AVX512 = "avx512f" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() \
    else False
VECTORS = "_mm512_fmadd_ps(vw0, "  # the x86 rows' first tap (isa/x86/floatdw.py)
BAND = re.compile(r"float xp\[\d+\] OPFUSE_ALIGNED;")  # the band core's input rows


def _block(size: int, dw: dict, residual: bool = False) -> ChainGraph:
    """1x1, Relu, the depthwise conv ``dw``, Clip (or + the 1x1's output), 1x1 (MobileNetV2's
    block) on a square map."""
    g = ChainGraph(6, size, size)
    first = g.conv(12, (1, 1))
    g.op("Relu")
    g.conv(12, group=12, **dw)
    if residual:
        g.op("Add", first)
    else:
        g.op("Clip", g.const("lo", np.array(0.0)), g.const("hi", np.array(6.0)))
    g.conv(6, (1, 1))
    return g


GRAPHS = {  # name: (map side, depthwise conv, read in place by the portable C)
    "stride2_end_pad": (12, {"k": (3, 3), "pads": (0, 0, 1, 1), "s": 2}, True),  # 12 -> 6
    "stride2_dilated_asymmetric": (11, {"k": (5, 5), "pads": (3, 2, 4, 1), "s": 2, "d": 2},
                                   True),  # 11 -> 5 rows, 3 columns
    "three_columns": (3, {"k": (3, 3), "pads": (1, 1, 1, 1)}, True),
    "wide_rows": (40, {"k": (3, 3), "pads": (1, 1, 1, 1)}, False),
    "wide_rows_stride2": (70, {"k": (3, 3), "pads": (1, 1, 1, 1), "s": 2}, False),  # 70 -> 35
    "seven_by_seven": (21, {"k": (7, 7), "pads": (3, 3, 3, 3)}, False),
}


def _run(source: Path, folder: Path, cascades: bool, flags: list[str]) -> str:
    result = compile_model(str(source), streaming("x86-host", cascade_band_rows=1))
    emit_c(result, folder, cascades=cascades)
    build_shared(folder, flags)
    feeds, ref, _ = reference(result.source)
    got = CModel(folder).run(feeds)
    for name, r in ref.items():
        np.testing.assert_allclose(np.asarray(got[name]).reshape(np.shape(r)), r,
                                   rtol=1e-4, atol=1e-4)
    return (folder / "model.c").read_text()


@pytest.mark.parametrize("march", ["native", "x86-64-v3", "x86-64-v2"])
@pytest.mark.parametrize("cascades", [False, True])
@pytest.mark.parametrize("name", [*GRAPHS, "residual_add"])
def test_depthwise_matches_onnxruntime(name: str, cascades: bool, march: str,
                                       tmp_path: Path) -> None:
    if march == "native" and not AVX512:
        pytest.skip("the zmm rows need an AVX-512 host")
    size, dw, placed = GRAPHS.get(name, GRAPHS["wide_rows"])
    source = _block(size, dw, residual=name == "residual_add").save(tmp_path / "block.onnx")
    flags = [f"-march={march}"]
    text = _run(source, tmp_path / "c", cascades, flags)
    if cascades:
        assert "ring" in text, "the block does not stream"
    assert (VECTORS in text) == (name != "residual_add")  # a clamps-only epilogue
    assert bool(BAND.search(text)) != placed


@pytest.mark.parametrize(("ow", "stride", "placed"), [
    (6, 2, True), (7, 2, False), (3, 1, True), (4, 1, False),
])
def test_vector_unit_reads_only_narrow_rows_in_place(ow: int, stride: int, placed: bool) -> None:
    g = ConvGeom(1, 8, 2 * ow, 2 * ow, 8, ow, ow, 8, (3, 3), (stride, stride), (1, 1), (1, 1))
    assert convf.depthwise_in_place(g, scalar=False) == placed
    assert convf.depthwise_in_place(g, scalar=True)  # a scalar FPU: always
