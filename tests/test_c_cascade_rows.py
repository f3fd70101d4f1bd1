"""The conv members of cascaded C (the layer-by-layer cores dwconv.py and convdirect.py reading
rings through opfuse/backends/c/rowsource.py) on the shapes that once took separate row kernels,
against onnxruntime: wide rows and narrow ones (7 to 19 columns) with channel counts that fill no
register tile, odd widths, stride 2, dilation, padding, groups, a channel multiplier, short and
strided depthwise rows, and residual joins; plus AddressSanitizer/UndefinedBehaviorSanitizer on
the strided, dilated, short-row and residual paths."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import onnx
import pytest

from opfuse.backends.c import emit_c
from opfuse.pipeline import compile_model
from tests.helpers.c_cascade import check_against_onnxruntime, host
from tests.helpers.cascade import conv_chain
from tests.helpers.sanitize import sanitized_run_matches

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

# name: (layers, residual, size); conv_chain's input has 8 channels, every conv is followed by Relu
ROW_CHAINS = {
    # 1x1 column tiles: 13 and 6 channels fill no block of 4, 19 columns are one partial chunk
    "column_tiles_odd": ([{"k": 1, "out": 13}, {"k": 3, "group": 13}, {"k": 1, "out": 6}],
                         None, 19),
    # rows 9 wide: channel tiles, 21 channels fill no block of 16, a residual add read per row
    "channel_tiles_residual": ([{"k": 1, "out": 21}, {"k": 3, "group": 21}, {"k": 1, "out": 8}],
                               (0, 2), 9),
    # a 3x3 stride-2 padded conv and a 3x3 conv through line buffers (37 -> 19 columns)
    "spatial_stride_2": ([{"k": 3, "s": 2, "out": 10}, {"k": 3, "out": 12}, {"k": 1, "out": 5}],
                         None, 37),
    # narrow rows through line buffers: dilation 2, then stride 2 (13 -> 13 -> 7 columns)
    "spatial_narrow_dilated": ([{"k": 3, "d": 2, "out": 20}, {"k": 3, "s": 2, "out": 17},
                                {"k": 1, "out": 9}], None, 13),
    # two groups, then a depthwise conv with a channel multiplier of 2 (not the depthwise path)
    "grouped_and_multiplier": ([{"k": 3, "group": 2, "out": 12}, {"k": 3, "group": 12, "out": 24},
                                {"k": 1, "out": 8}], None, 17),
    # depthwise rows shorter than a vector (11 -> 6 columns), strided and not
    "depthwise_short_rows": ([{"k": 1, "out": 16}, {"k": 3, "group": 16, "s": 2},
                              {"k": 3, "group": 16}, {"k": 1, "out": 8}], None, 11),
    # a wide 5x5 depthwise conv with stride 2 and dilation 2 (column phases, 40 -> 20 columns)
    "depthwise_wide_strided_dilated": ([{"k": 1, "out": 16}, {"k": 5, "group": 16, "d": 2, "s": 2},
                                        {"k": 1, "out": 8}], None, 40),
    # a depthwise member computing two rows a step (its consumer has stride 2): bands of 2 rows
    "depthwise_two_rows_a_step": ([{"k": 1, "out": 16}, {"k": 3, "group": 16},
                                   {"k": 3, "group": 16, "s": 2}, {"k": 1, "out": 8}], None, 23),
}  # fmt: skip


def _chain(name: str, folder: Path) -> Path:
    layers, residual, size = ROW_CHAINS[name]
    path = folder / f"{name}.onnx"
    onnx.save(conv_chain(layers, size=size, residual=residual), path)
    return path


def _streamed(source: Path, folder: Path):  # noqa: ANN202
    result = compile_model(source, host(source.stem))
    assert result.partition.cascades, "the partitioner made no cascade of this chain"
    emitted = emit_c(result, folder, cascades=True)
    text = (folder / "model.c").read_text()
    assert re.search(r"^static void k\d+_cascade", text, re.M), emitted.cascades
    return result


@pytest.mark.parametrize("name", list(ROW_CHAINS))
def test_row_kernels_match_onnxruntime(name: str, tmp_path: Path) -> None:
    source = _chain(name, tmp_path)
    result = _streamed(source, tmp_path / "c")
    members = {n for k in result.partition.cascades for n in k.nodes}
    convs = [n.name for n in result.optimized.graph if n.op_type == "Conv"]
    assert set(convs) <= members, "every conv of the chain streams in a cascade"
    check_against_onnxruntime(source, tmp_path / "c")


@pytest.mark.parametrize("name", ["spatial_stride_2", "spatial_narrow_dilated",
                                  "depthwise_short_rows", "channel_tiles_residual"])
def test_row_kernels_are_sanitizer_clean(name: str, tmp_path: Path) -> None:
    source = _chain(name, tmp_path)
    folder = tmp_path / "c"
    _streamed(source, folder)
    sanitized_run_matches(folder, source)


def test_x86_host_streams_no_row_narrower_than_its_cascade_min_width(tmp_path: Path) -> None:
    # a chain of 19-column rows: x86-host keeps every value whole and says why per edge
    result = compile_model(_chain("column_tiles_odd", tmp_path), "x86-host")
    assert not result.partition.cascades
    messages = [d.message for d in result.partition.cascade_decisions]
    assert messages and all("below cascade_min_width = 56" in m for m in messages)
    assert {d.reason for d in result.partition.cascade_decisions} == {"not_supported_by_target"}
    # mobilenet_v2: the cascades left are the wide early blocks, every ring at least 56 wide
    result = compile_model("mobilenet_v2", "x86-host")
    assert result.partition.cascades
    values = {v.name: v for n in result.optimized.graph for v in n.outputs}
    for kernel in result.partition.cascades:
        for ring in kernel.ring_buffers:
            assert values[ring.value].shape[-1] >= 56


@pytest.mark.parametrize("name", ["depthwise_two_rows_a_step", "depthwise_wide_strided_dilated"])
def test_depthwise_member_in_several_bands_per_step(name: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # no band budget: the depthwise core splits every step (two rows for the first chain) into
    # bands of one output row, so rows a..b loop and each band's rows come slot by slot
    # from the ring
    from opfuse.backends.c import dwconv

    monkeypatch.setattr(dwconv, "BAND_FLOATS", 1)
    source = _chain(name, tmp_path)
    _streamed(source, tmp_path / "c")
    text = (tmp_path / "c" / "model.c").read_text()
    assert re.search(r"for \(int oh0 = a; oh0 <= b; oh0 \+= 1\)", text), "no one-row bands"
    check_against_onnxruntime(source, tmp_path / "c")


@pytest.mark.parametrize("name", ["column_tiles_odd", "channel_tiles_residual", "spatial_stride_2",
                                  "spatial_narrow_dilated", "grouped_and_multiplier"])
def test_direct_core_members_match_onnxruntime(name: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # no line-buffer budget: every conv member but the depthwise ones runs the layer-by-layer
    # direct core on the ring (what a conv whose line buffer is too large takes)
    from opfuse.kernelplan import convf

    monkeypatch.setattr(convf, "LINE_FLOATS", -1)
    source = _chain(name, tmp_path)
    _streamed(source, tmp_path / "c")
    text = (tmp_path / "c" / "model.c").read_text()
    assert "int ro[" in text and "float line[" not in text, "not the direct core"
    check_against_onnxruntime(source, tmp_path / "c")
    sanitized_run_matches(tmp_path / "c", source)
