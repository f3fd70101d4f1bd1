"""The portable int8 conv's ``conv_lanes`` path (kernelplan/conv8.py: short rows, or a pointwise
plane under one pixel tile) as pointwise.py's channel tiles, the nest float's narrow cascade
members run (``pointwise.channel_tiles``: ``ocb`` output channels x ``tile`` columns, a vector
over the channels), over the line buffer of int8/row_tiles.py, the plane read as one row, or a
cascade member's ring rows; built with -march=x86-64-v2 (the x86 module's ``#else``, the only C
on x86 that runs it) and bit for bit with TFLite Micro. The cases cover channel pairs, an odd
input channel's tap pairs, groups (a depthwise multiplier of 16), strides, dilations, pads,
columns not a multiple of the tile, a residual Add in the epilogue and the graph input's NHWC
rows read in place."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

from opfuse.api import compile  # noqa: E402
from opfuse.backends.c import emit_c  # noqa: E402
from opfuse.backends.c.conv import conv_geom  # noqa: E402
from opfuse.backends.c.ctype import ctype_of  # noqa: E402
from opfuse.backends.c.int8.plan import conv8_plan  # noqa: E402
from opfuse.cost.cwork import conv_work  # noqa: E402
from opfuse.kernelplan import conv8  # noqa: E402
from opfuse.measure.run.host import CModel, build_shared  # noqa: E402
from opfuse.measure.validate.tflite_reference import TfliteReference  # noqa: E402
from tests.helpers.c_cascade import run_cascaded  # noqa: E402
from tests.helpers.int8_chain import Chain  # noqa: E402

V2 = ["-march=x86-64-v2"]


def _chains() -> dict[str, Chain]:
    """Each chain's last conv takes ``conv_lanes`` (its first, a 1x1 conv, reads the graph
    input's NHWC rows)."""
    return {
        # 7 columns: a tile of 4, then one of 3; 8 input channels, in pairs
        "s1_same": Chain(7, 5, 40).conv(8, 1).conv(16, 3, act="relu"),
        # 7 input channels: 3 pairs, the last one's taps paired; 2 blocks of 16; stride 2
        "odd_channels_s2": Chain(13, 3, 41).conv(7, 1).conv(32, 3, 2, act="relu6"),
        "dilated": Chain(9, 4, 42).conv(6, 1).conv(16, 3, d=2),
        "valid_5x5": Chain(12, 4, 43).conv(5, 1, act="relu").conv(16, 5, padding="VALID"),
        # groups: a depthwise multiplier of 16 (one input channel a group: its taps paired)
        "depthwise_mult16": Chain(6, 4, 44).conv(3, 1).conv(48, 3, depthwise=True),
        # a 5x5 plane under one pixel tile, read as one row: 25 columns, 23 input channels
        "pointwise_plane": Chain(5, 4, 45).conv(23, 1).conv(32, 1, act="relu"),
        "1x1_s2": Chain(12, 4, 46).conv(9, 1).conv(16, 1, 2),
        # a residual Add of the block's input in the conv's epilogue (Chain8)
        "residual": Chain(8, 4, 47).conv(16, 1).save("a").conv(16, 3, act="relu").add("a"),
    }


def _check(path: Path, folder: Path, seeds: int = 3) -> None:
    model = CModel(build_shared(folder, V2))
    ref = TfliteReference(path)
    for seed in range(seeds):
        feeds = ref.random_inputs(seed)
        got = model.run(feeds)
        for name, value in ref.run(feeds).items():
            c = got[name].reshape(value.shape)
            assert int(np.sum(c != value)) == 0, (seed, name)


def _lanes_convs(result) -> list:  # noqa: ANN001
    """The plans of the convs the C writes as channel tiles (int8 activations, not depthwise
    with multiplier 1)."""
    plans = []
    for n in result.optimized.graph:
        if n.op_type == "Conv":
            plan = conv8_plan(conv_geom(n), n, ctype_of(n.inputs[0]).name)
            if plan.path == "conv_lanes":
                plans.append(plan)
    return plans


def _tiles(code: str) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in re.findall(r"int32_t s\[(\d+)\]\[(\d+)\]", code)}


@pytest.mark.parametrize("case", sorted(_chains()))
def test_channel_tiles_layer_by_layer_match_tflite_micro(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(_chains()[case].build())
    result = compile(path, "x86-host")
    emit_c(result, tmp_path / "c", cascades=False)
    code = (tmp_path / "c" / "model.c").read_text()
    plans = _lanes_convs(result)
    assert plans, case
    # the tiles are the plan's: ocb channels x tile columns (and a narrower remainder)
    assert (conv8.CHANNEL_WIDTH, conv8.LANES) in _tiles(code)
    assert all((p.tile, p.ocb) == (conv8.CHANNEL_WIDTH, conv8.LANES) for p in plans)
    assert re.search(r"s\[t\]\[o\] \+= ", code)
    assert ("int8_t line[" in code) == (case not in ("pointwise_plane",))
    _check(path, tmp_path / "c")


def test_channel_tiles_stem_reading_nhwc_matches_tflite_micro(tmp_path: Path) -> None:
    """A first conv with short rows reads the graph input's NHWC rows into its line buffer."""
    from tests.helpers.c_int8 import conv_pair

    p = conv_pair(6, 7, 8, 16, 3, 1, "SAME", 1, "relu", None, 10)
    p.m.inputs, p.m.outputs = [p.x], [p.y]
    path = tmp_path / "stem.tflite"
    path.write_bytes(p.m.build())
    emit_c(compile(path, "x86-host"), tmp_path / "c", cascades=False)
    assert (conv8.CHANNEL_WIDTH, conv8.LANES) in _tiles((tmp_path / "c" / "model.c").read_text())
    _check(path, tmp_path / "c")


@pytest.mark.parametrize("case", ["members", "residual"])
def test_channel_tiles_cascaded_match_tflite_micro(case: str, tmp_path: Path) -> None:
    """Cascade members on short rows: a spatial conv over a line buffer of its ring rows, a 1x1
    conv reading its ring rows in place, and one ending in a residual Add."""
    chain = {
        "members": Chain(13, 8, 48).conv(16, 1, act="relu").conv(32, 3, act="relu6")
        .conv(16, 1).conv(16, 3, 2),
        "residual": Chain(12, 8, 49).conv(16, 1).save("a").conv(16, 3, act="relu").add("a")
        .conv(32, 1),
    }[case]
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(chain.build())
    result, _ = run_cascaded(path, tmp_path / "c")
    members = [m for c in result.partition.cascades for m in c.ops]
    assert "Conv" in members
    assert (conv8.CHANNEL_WIDTH, conv8.LANES) in _tiles((tmp_path / "c" / "model.c").read_text())
    _check(path, tmp_path / "c")


def test_the_plan_chooses_channel_tiles_and_the_c_and_cost_follow_it(tmp_path: Path,
                                                                        monkeypatch) -> None:
    """Rows under ``SHORT_ROW`` with a multiple of 16 channels a group are ``conv_lanes``, wider
    rows ``conv_rows`` (no channel tile in the C); the C's tiles and the cost model's loops are
    read from the plan: another tile width moves both, and the C stays bit-exact."""
    g = conv8.ConvGeom(1, 8, 6, 6, 32, 6, 6, 1, (3, 3), (1, 1), (1, 1), (1, 1))
    assert conv8.plan_conv8(conv8.Conv8(g, (1, 1))) == conv8.ConvPlan("conv_lanes", 16, 4)
    wide = conv8.ConvGeom(1, 8, 40, 40, 32, 40, 40, 1, (3, 3), (1, 1), (1, 1), (1, 1))
    assert conv8.plan_conv8(conv8.Conv8(wide, (1, 1))).path == "conv_rows"
    assert conv8.plan_conv8(conv8.Conv8(g, (1, 1)), member=True).path == "conv_lanes"

    wide_path = tmp_path / "wide.tflite"
    wide_path.write_bytes(Chain(34, 4, 50).conv(8, 1).conv(16, 3).build())
    emit_c(compile(wide_path, "x86-host"), tmp_path / "wide", cascades=False)
    assert not _tiles((tmp_path / "wide" / "model.c").read_text())

    path = tmp_path / "s1.tflite"
    path.write_bytes(_chains()["s1_same"].build())
    before = compile(path, "x86-host")
    node = next(n for n in before.optimized.graph if n.op_type == "Conv" and conv_geom(n).k == (3, 3))
    loops = conv_work(node).loops
    g = conv_geom(node)  # 7 columns: tiles of 4 and 3, 16 channels, 8 input channels, 9 taps
    assert loops == g.oh * 2 * 8 * 9
    monkeypatch.setattr(conv8, "CHANNEL_WIDTH", 3)
    result = compile(path, "x86-host")
    emit_c(result, tmp_path / "c", cascades=False)
    assert _tiles((tmp_path / "c" / "model.c").read_text()) == {(3, 16), (1, 16)}
    assert conv_work(node).loops == g.oh * 3 * 8 * 9  # tiles of 3, 3 and 1
    _check(path, tmp_path / "c", seeds=1)
