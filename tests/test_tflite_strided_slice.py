"""TFLite STRIDED_SLICE with computed begin (issue 18): imported as an ONNX Slice whose starts,
ends and steps are values, masks included; onnxruntime on the imported model against LiteRT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.tflite_builder import TfliteBuilder


def _model(path: Path) -> Path:
    """x[:, begin1:5, ::2 from begin2 to the end, begin3] with begin a graph input (computed at
    run time, as MediaPipe's recrop models compute theirs): begin_mask on axis 0, end_mask on
    axis 2, shrink_axis_mask on axis 3."""
    b = TfliteBuilder()
    x = b.input("x", (1, 6, 8, 4), np.float32)
    begin = b.input("begin", (4,), np.int32)
    end = b.const("end", np.array([1, 5, 8, 3], np.int32))
    strides = b.const("strides", np.array([1, 1, 2, 1], np.int32))
    y = b.tensor("y", (1, 4, 4), np.float32)
    b.op("STRIDED_SLICE", [x, begin, end, strides], [y], "StridedSliceOptions",
         BeginMask=0b0001, EndMask=0b0100, ShrinkAxisMask=0b1000)
    b.output(y)
    path.write_bytes(b.build())
    return path


@pytest.mark.parametrize("begin", [[0, 1, 0, 2], [0, -5, 0, -1], [3, 1, 1, 0], [0, 0, 3, 1]])
def test_computed_strided_slice_matches_litert(tmp_path: Path, begin: list[int]) -> None:
    import onnxruntime as ort

    from opfuse.measure.validate.tflite_reference import TfliteReference
    from opfuse.pipeline import compile_model, read

    path = _model(tmp_path / "slice.tflite")
    proto = read(path)
    assert "Slice" in [n.op_type for n in proto.graph.node]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3  # a begin giving another shape than the file states: a warning
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 6, 8, 4)).astype(np.float32),
             "begin": np.asarray(begin, np.int32)}
    want = TfliteReference(path).run(feeds)["y"]
    (got,) = sess.run(None, feeds)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # the Slice is its own kernel: data movement never fuses
    result = compile_model(path)
    sliced = next(k for k in result.partition.kernels if "Slice" in k.ops)
    assert sliced.ops == ("Slice",)


def test_ellipsis_mask_is_one_line_naming_the_operator(tmp_path: Path) -> None:
    from opfuse.errors import OpfuseError
    from opfuse.pipeline import read

    b = TfliteBuilder()
    x = b.input("x", (1, 6, 8, 4), np.float32)
    begin = b.input("begin", (2,), np.int32)
    end = b.const("end", np.array([1, 5], np.int32))
    strides = b.const("strides", np.array([1, 1], np.int32))
    y = b.tensor("y", (1, 4, 8, 4), np.float32)
    b.op("STRIDED_SLICE", [x, begin, end, strides], [y], "StridedSliceOptions", EllipsisMask=1)
    b.output(y)
    path = tmp_path / "ellipsis.tflite"
    path.write_bytes(b.build())
    with pytest.raises(OpfuseError, match=r"operator 0 \(STRIDED_SLICE\).*ellipsis"):
        read(path)
