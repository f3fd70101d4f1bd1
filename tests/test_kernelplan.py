"""The int8 conv plan (opfuse/kernelplan/conv8.py) is the one decision behind the C template a
conv takes and the work the cost model prices: for every conv of a set of geometries the
generated C runs the plan's path (its own template's loop), and the cost model names the same
path. A 1-D depthwise conv is the case the two used to decide apart (the cost model priced it
on the SIMD pairs, which only 2-D convs get)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from opfuse.backends.c.conv import conv_geom
from opfuse.backends.c.int8.plan import conv8_plan
from opfuse.cost.cwork import conv_work
from opfuse.kernelplan.conv8 import Conv8, ConvGeom, interior, plan_conv8


def _conv(x: list[int], w: list[int], y: list[int], **attrs) -> ir.Node:  # noqa: ANN003
    xv = ir.Value(name="x", shape=ir.Shape(x), type=ir.TensorType(ir.DataType.INT8))
    wv = ir.Value(name="w", shape=ir.Shape(w), type=ir.TensorType(ir.DataType.INT8),
                  const_value=ir.tensor(np.ones(w, np.int8)))
    yv = ir.Value(name="y", shape=ir.Shape(y), type=ir.TensorType(ir.DataType.INT8))
    return ir.Node("", "Conv", [xv, wv], attributes=[ir.AttrInt64(k, v) if isinstance(v, int)
                                                      else ir.AttrInt64s(k, v)
                                                      for k, v in attrs.items()],
                   outputs=[yv])


CASES = {
    "depthwise_3x3": (([1, 8, 12, 12], [8, 1, 3, 3], [1, 8, 12, 12]),
                      {"group": 8, "pads": [1, 1, 1, 1]}, "depthwise"),
    "depthwise_1d": (([1, 8, 20], [8, 1, 3], [1, 8, 20]), {"group": 8, "pads": [1, 1]},
                     "conv_rows"),
    "pointwise": (([1, 16, 10, 10], [8, 16, 1, 1], [1, 8, 10, 10]), {}, "pointwise"),
    "short_rows": (([1, 8, 6, 6], [32, 8, 3, 3], [1, 32, 4, 4]), {}, "conv_lanes"),
    "rows": (([1, 3, 40, 40], [6, 3, 3, 3], [1, 6, 38, 38]), {}, "conv_rows"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_emitter_and_the_cost_model_read_one_plan(name: str) -> None:
    (x, w, y), attrs, path = CASES[name]
    node = _conv(x, w, y, **attrs)
    assert conv8_plan(conv_geom(node), node, "int8_t").path == path
    assert conv_work(node).path == path


@pytest.mark.parametrize("k", [1, 3, 5, 7])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_groups_read_only_bytes_of_the_row(k: int, stride: int) -> None:
    """Every group ``interior`` admits reads inside the row, and one more would not (it is the
    widest such run), checked against the byte offsets a group reads."""
    from opfuse.kernelplan.conv8 import PAIR, reach

    for iw in range(1, 40):
        pad = k // 2
        ow = (iw + 2 * pad - k) // stride + 1
        if ow < 1:
            continue
        first, groups = interior(iw, k, stride, pad)
        span = reach(k, stride)

        def inside(ow0: int, pad: int = pad, span: int = span, iw: int = iw) -> bool:
            return ow0 * stride - pad >= 0 and ow0 * stride - pad + span <= iw

        assert all(inside(first + PAIR * i) for i in range(groups)), iw
        assert not inside(first + PAIR * groups) or first + PAIR * groups >= ow, iw
        g = ConvGeom(1, 4, 9, iw, 4, 5, ow, 4, (k, k), (stride, stride), (1, 1), (pad, pad))
        plan = plan_conv8(Conv8(g, (pad, pad)))
        assert plan.dw_columns == min(ow, groups * PAIR)



@pytest.mark.parametrize(("n", "k"), [(1, 1), (8, 128), (128, 640), (300, 203), (640, 128),
                                      (130, 5)])
def test_gemv_blocks_cover_the_channel_vectors(n: int, k: int) -> None:
    """The GEMV's blocks are contiguous, cover N's vectors once, at most GEMV_BLOCK vectors
    each and balanced; the chains over K stay within K's 4-byte steps."""
    from opfuse.kernelplan.conv8 import GEMV_BLOCK, GEMV_LANES, gemv_blocks

    plan = gemv_blocks(n, k)
    at = 0
    for c0, cs in plan.blocks:
        assert c0 == at and cs % GEMV_LANES == 0 and 0 < cs <= GEMV_BLOCK * GEMV_LANES
        at += cs
    assert at == -(-n // GEMV_LANES) * GEMV_LANES
    sizes = [cs for _, cs in plan.blocks]
    assert max(sizes) - min(sizes) <= GEMV_LANES
    for _, cs in plan.blocks:
        assert 1 <= plan.chains(cs // GEMV_LANES) <= plan.k4
    assert gemv_blocks(8, 128).chains(1) > 1  # a narrow layer does not wait on one chain


def test_one_row_fully_connected_takes_the_gemv(monkeypatch: pytest.MonkeyPatch) -> None:
    """uses_gemv8 decides, and the x86 emitter obeys: one row is the GEMV, two rows the conv
    core; with the plan forced off one row is the conv core again."""
    import tempfile
    from pathlib import Path

    from opfuse.backends.c import emit_c
    from opfuse.backends.c.isa.x86 import conv as x86conv
    from opfuse.kernelplan.conv8 import uses_gemv8
    from tests.helpers.qgraphs import QGraph, compile_ir

    assert uses_gemv8(1) and not uses_gemv8(2)

    def c_of(rows: int) -> str:
        rng = np.random.default_rng(rows)
        g = QGraph()
        xi = g.input((rows, 40), 0.03, 7)
        wt = rng.integers(-127, 128, (24, 40)).astype(np.int8)
        out = g.op("Gemm", [xi, g.const(wt, np.full(1, 0.01, np.float32), 0),
                            g.const(np.zeros(24, np.int32), 0.0003, 0)], (rows, 24), 0.1, -3,
                   transB=1)
        with tempfile.TemporaryDirectory() as tmp:
            emit_c(compile_ir(g.model(out)), Path(tmp) / "m")
            return (Path(tmp) / "m" / "model.c").read_text()

    assert "batch-1 GEMV" in c_of(1)
    assert "batch-1 GEMV" not in c_of(2) and "opfuse_x86_dot16" in c_of(2)
    monkeypatch.setattr(x86conv, "uses_gemv8", lambda rows: False)
    assert "batch-1 GEMV" not in c_of(1)
