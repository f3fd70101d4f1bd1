"""The pixel tiles of a float conv (opfuse/backends/c/pixeltiles.py: the ``pixels`` path of
opfuse/kernelplan/convf.py, what a scalar FPU such as Cortex-M4/M7/M33 takes), one loop nest for
layer-by-layer kernels (whole tensors, several images, 1-D convs, the epilogue chain with a
residual) and cascade members (rings), built for the host with the plan forced to a scalar FPU
and checked against onnxruntime (the boards' own runs: tests/test_mcu.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from opfuse.backends.c import emit_c
from opfuse.kernelplan import convf
from opfuse.pipeline import compile_model
from tests.helpers.c_cascade import check_against_onnxruntime, host
from tests.helpers.cascade import conv_chain
from tests.helpers.sanitize import sanitized_run_matches

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

# name: (layers, residual, size); conv_chain's input has 8 channels, every conv is followed by Relu
CHAINS = {
    # 13 and 6 channels fill no block of 8 (zero-padded sums), 19 columns
    "odd_channels": ([{"k": 1, "out": 13}, {"k": 3, "group": 13}, {"k": 1, "out": 6}], None, 19),
    # 16 channels a block, a residual add in the epilogue, rows 9 wide
    "residual": ([{"k": 1, "out": 32}, {"k": 3, "group": 32}, {"k": 1, "out": 8}], (0, 2), 9),
    # a 3x3 stride-2 padded conv and a 3x3 conv through line buffers (37 -> 19 columns)
    "spatial_stride_2": ([{"k": 3, "s": 2, "out": 10}, {"k": 3, "out": 12}, {"k": 1, "out": 5}],
                         None, 37),
    # dilation 2, then stride 2 (13 -> 13 -> 7 columns)
    "narrow_dilated": ([{"k": 3, "d": 2, "out": 20}, {"k": 3, "s": 2, "out": 17},
                        {"k": 1, "out": 9}], None, 13),
    # two groups, then a depthwise conv with a channel multiplier of 2 (pixel tiles, not depthwise)
    "grouped_and_multiplier": ([{"k": 3, "group": 2, "out": 12}, {"k": 3, "group": 12, "out": 24},
                                {"k": 1, "out": 8}], None, 17),
}  # fmt: skip


@pytest.fixture
def scalar_fpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every float conv planned as for a scalar FPU, whatever the target's ISA record says, and
    pixel tiles for every spatial reduction (the plan gives large ones to the direct core)."""
    real = convf.plan_convf
    monkeypatch.setattr(convf, "PIXEL_REDUCTION", 1 << 30)
    monkeypatch.setattr(convf, "plan_convf",
                        lambda g, scalar, member=False, fma=False: real(g, True, member))


def _chain(name: str, folder: Path) -> Path:
    layers, residual, size = CHAINS[name]
    path = folder / f"{name}.onnx"
    onnx.save(conv_chain(layers, size=size, residual=residual), path)
    return path


def _built(source: Path, folder: Path, cascades: bool) -> str:
    result = compile_model(source, host(source.stem))
    if cascades:
        assert result.partition.cascades, "the partitioner made no cascade of this chain"
    emit_c(result, folder, cascades=cascades)
    text = (folder / "model.c").read_text()
    assert "float a0 = " in text, "not the pixel tiles"
    return text


@pytest.mark.parametrize("name", list(CHAINS))
def test_layer_by_layer_pixel_tiles_match_onnxruntime(name: str, tmp_path: Path,
                                                      scalar_fpu: None) -> None:
    source = _chain(name, tmp_path)
    text = _built(source, tmp_path / "c", cascades=False)
    assert "float row[" in text, "not the layer-by-layer pixel tiles (a row per channel)"
    check_against_onnxruntime(source, tmp_path / "c")


@pytest.mark.parametrize("name", list(CHAINS))
def test_cascade_member_pixel_tiles_match_onnxruntime(name: str, tmp_path: Path,
                                                      scalar_fpu: None) -> None:
    source = _chain(name, tmp_path)
    _built(source, tmp_path / "c", cascades=True)
    check_against_onnxruntime(source, tmp_path / "c")


def _two_images(path: Path) -> Path:
    """Two images through a stem-like 3x3 stride-2 conv (3 -> 20 channels, biased, Relu), then
    a 1-D conv over the rows' flattened columns (20 -> 16 channels, k 3, padded, biased: one
    block of 16, the kernel's own bias pointer)."""
    rng = np.random.default_rng(1)

    def const(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, shape,
                                  rng.standard_normal(shape).astype(np.float32).ravel())

    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], name="stem"),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu"),
        helper.make_node("Reshape", ["r0", "shape"], ["flat"], name="flat"),
        helper.make_node("Conv", ["flat", "w1", "b1"], ["y"], kernel_shape=[3], pads=[1, 1],
                         name="line"),
    ]
    inits = [const("w0", (20, 3, 3, 3)), const("b0", (20,)), const("w1", (16, 20, 3)), const("b1", (16,)),
             helper.make_tensor("shape", TensorProto.INT64, (3,), [2, 20, 144])]
    graph = helper.make_graph(
        nodes, "two_images", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 23, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 144])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_pixel_tiles_over_several_images_and_a_1d_conv(tmp_path: Path, scalar_fpu: None) -> None:
    source = _two_images(tmp_path / "two_images.onnx")
    _built(source, tmp_path / "c", cascades=False)
    check_against_onnxruntime(source, tmp_path / "c")
    sanitized_run_matches(tmp_path / "c", source)


@pytest.mark.parametrize("name", ["spatial_stride_2", "residual"])
def test_pixel_tiles_are_sanitizer_clean(name: str, tmp_path: Path, scalar_fpu: None) -> None:
    source = _chain(name, tmp_path)
    for cascades in (False, True):
        folder = tmp_path / ("cascaded" if cascades else "layers")
        _built(source, folder, cascades)
        sanitized_run_matches(folder, source)


def test_the_plan_takes_pixel_tiles_on_scalar_fpus_only() -> None:
    # the plan is the one decision: armv7em targets (vector_bits = 0) take pixel tiles for a
    # stem and a pointwise conv, layer by layer and cascaded; vector ISAs a stem layer by layer
    # only (STEM_LANES channels a tile, every tap unrolled)
    from opfuse.kernelplan.conv8 import ConvGeom
    from opfuse.targets import load_target

    stem = ConvGeom(1, 3, 128, 128, 16, 64, 64, 1, (3, 3), (2, 2), (1, 1), (1, 1))
    pointwise = ConvGeom(1, 32, 16, 16, 24, 16, 16, 1, (1, 1), (1, 1), (1, 1), (0, 0))
    depthwise = ConvGeom(1, 32, 16, 16, 32, 16, 16, 32, (3, 3), (1, 1), (1, 1), (1, 1))
    spatial = ConvGeom(1, 16, 32, 32, 16, 32, 32, 1, (3, 3), (1, 1), (1, 1), (1, 1))
    for target in ("cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55", "x86-host"):
        scalar = load_target(target).isa.scalar
        assert scalar == (target in ("cortex-m4", "cortex-m7", "cortex-m33"))
        for g, lanes in ((stem, 16), (pointwise, 8)):
            for member in (False, True):
                plan = convf.plan_convf(g, scalar, member)
                vector_stem = g is stem and not member and not scalar
                assert (plan.path == "pixels") == (scalar or vector_stem)
                assert not scalar or plan.lanes == lanes
                assert not vector_stem or (plan.lanes, plan.unrolled) == (convf.STEM_LANES, True)
        if not scalar:  # a vector unit's pointwise conv: pointwise.py's column tiles, layer by
            # layer over its 256-pixel plane and as a member (8 x 16 under the register tile)
            tiles = [(p.path, p.lanes, p.columns) for p in (
                convf.plan_convf(pointwise, scalar), convf.plan_convf(pointwise, scalar, True),
                convf.plan_convf(pointwise, scalar, True, fma=True))]
            assert tiles == [("columns", 8, 32), ("columns", 4, 24), ("columns", 8, 16)]
        assert convf.plan_convf(depthwise, scalar).path == "depthwise"
        # 16 input channels x 9 taps: the direct core's tile on every ISA (layer by layer:
        # conv.py's vector templates, which end in it)
        assert convf.plan_convf(spatial, scalar).path == "vector"
        assert convf.plan_convf(spatial, scalar, member=True).path == ("direct" if scalar
                                                                       else "columns")
