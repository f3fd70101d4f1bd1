"""Col2Im float C kernel (opfuse/backends/c/col2im.py) against onnxruntime, on small models the
test writes: block shapes, strides (overlapping blocks and gaps between them), dilations, pads,
batch, 1-D and 3-D images, and a Col2Im between other kernels; once on cortex-m7 under QEMU."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.backends.c import emit_c
from opfuse.errors import OpfuseError
from opfuse.measure.validate.c_float import validate_c
from opfuse.pipeline import compile_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _grid(image: list[int], block: list[int], strides: list[int], dilations: list[int],
          pads: list[int]) -> int:
    rank = len(image)
    return int(np.prod([(image[d] + pads[d] + pads[d + rank] - dilations[d] * (block[d] - 1) - 1)
                        // strides[d] + 1 for d in range(rank)]))


def col2im_model(image: list[int], block: list[int], strides: list[int] | None = None,
                 dilations: list[int] | None = None, pads: list[int] | None = None,
                 batch: int = 1, channels: int = 2, around: bool = False) -> onnx.ModelProto:
    """One Col2Im node (opset 18) on a graph input of columns; ``around`` puts a Relu before it
    and adds a constant after it, so it runs between other kernels."""
    rank = len(image)
    strides = strides or [1] * rank
    dilations = dilations or [1] * rank
    pads = pads or [0] * (2 * rank)
    cols = [batch, channels * int(np.prod(block)), _grid(image, block, strides, dilations, pads)]
    inits = [numpy_helper.from_array(np.array(image, np.int64), "image"),
             numpy_helper.from_array(np.array(block, np.int64), "block")]
    fold = helper.make_node("Col2Im", ["r" if around else "x", "image", "block"],
                            ["f" if around else "y"], name="fold", strides=strides,
                            dilations=dilations, pads=pads)
    nodes = [fold]
    if around:
        shift = np.random.default_rng(1).standard_normal([channels, *image]).astype(np.float32)
        inits.append(numpy_helper.from_array(shift, "shift"))
        nodes = [helper.make_node("Relu", ["x"], ["r"]), fold,
                 helper.make_node("Add", ["f", "shift"], ["y"])]
    graph = helper.make_graph(
        nodes, "col2im", [helper.make_tensor_value_info("x", TensorProto.FLOAT, cols)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, channels, *image])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


CASES = {
    "block_2x3_stride_1": {"image": [5, 6], "block": [2, 3]},
    "block_3x3_stride_2_padded": {"image": [7, 8], "block": [3, 3], "strides": [2, 2],
                                  "pads": [1, 1, 1, 1]},
    "dilated_asymmetric_pads": {"image": [6, 7], "block": [2, 3], "dilations": [2, 2],
                                "pads": [0, 1, 2, 0], "channels": 3},
    "gaps_between_blocks": {"image": [8, 9], "block": [2, 2], "strides": [3, 4]},
    "pads_wider_than_reach": {"image": [4, 5], "block": [3, 2], "strides": [1, 2],
                              "dilations": [3, 1], "pads": [3, 0, 3, 2]},
    "batch_of_two_mobilevit_patch": {"image": [4, 4], "block": [2, 2], "strides": [2, 2],
                                     "batch": 2, "channels": 4},
    "one_dim": {"image": [11], "block": [3], "strides": [2], "pads": [1, 2]},
    "three_dims": {"image": [3, 4, 5], "block": [2, 2, 3], "strides": [1, 2, 1],
                   "pads": [0, 1, 1, 0, 0, 1]},
    "between_other_kernels": {"image": [6, 6], "block": [3, 3], "strides": [2, 2],
                              "pads": [1, 1, 1, 1], "around": True},
}


def _close(report) -> None:  # noqa: ANN001
    assert report.ok, report
    for out in report.outputs:
        assert out.max_abs_err <= 1e-6 * max(out.max_ref, 1.0), out


@pytest.mark.parametrize("case", list(CASES))
def test_col2im_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    onnx.save(col2im_model(**CASES[case]), tmp_path / "m.onnx")
    _close(validate_c(tmp_path / "m.onnx", outdir=tmp_path / "c"))


def test_col2im_stays_its_own_kernel(tmp_path: Path) -> None:
    """The Relu before and the Add after are kernels of their own: the C sums no epilogue."""
    onnx.save(col2im_model([6, 6], [3, 3], [2, 2], around=True), tmp_path / "m.onnx")
    emitted = emit_c(compile_model(tmp_path / "m.onnx"), tmp_path / "c")
    assert emitted.kernels == 3
    assert "k1_col2im(" in (tmp_path / "c" / "model.c").read_text()


def test_a_block_that_does_not_fit_the_image_is_one_line(tmp_path: Path) -> None:
    model = col2im_model([5, 6], [2, 3])
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array([2, 4], np.int64),
                                                                "block"))
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(OpfuseError) as info:
        emit_c(compile_model(tmp_path / "m.onnx"), tmp_path / "c")
    assert "'fold'" in str(info.value) and "\n" not in str(info.value)


TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                    reason="needs gcc-arm-none-eabi and qemu-system-arm")
def test_col2im_on_cortex_m7_under_qemu(tmp_path: Path) -> None:
    from opfuse.measure.run.qemu import emulate_c

    onnx.save(col2im_model(**CASES["dilated_asymmetric_pads"]), tmp_path / "m.onnx")
    emu = emulate_c(compile_model(tmp_path / "m.onnx", "cortex-m7"), outdir=tmp_path / "c",
                    cascades=False)
    _close(emu.report)
