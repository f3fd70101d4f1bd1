"""ConvTranspose in the C backend (backends/c/convt.py: sub-pixel phases as column tiles) against
onnxruntime, one case per edge of the phase algebra (kernelplan/convt.py), and the phase algebra
itself against the definition of a transposed conv."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest
from onnx import helper

from opfuse.kernelplan.convt import axis_phases
from opfuse.measure.validate.c_float import validate_c
from tests.helpers.onnx_graphs import float_value, model, weight

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
N = helper.make_node


_f, _w = float_value, weight


def _model(nodes, inputs, inits) -> onnx.ModelProto:  # noqa: ANN001
    return model(nodes, inputs, [float_value("z", None)], inits)


def _convt(x, w, b=None, then=("Relu",), extra=(), **attrs) -> onnx.ModelProto:
    """ConvTranspose(x, w[, b]) then ``then`` (unary ops, or ``("Add", shape)``)."""
    inits = [_w("w", w)] + ([_w("b", [b], 1)] if b else [])
    nodes = [N("ConvTranspose", ["x", "w", *(["b"] if b else [])], ["y0"], **attrs)]
    inputs = [_f("x", x), *extra]
    last = "y0"
    for k, op in enumerate(then):
        if isinstance(op, tuple):  # a residual operand, a graph input
            nodes.append(N(op[0], [last, "r"], [f"y{k + 1}"]))
            inputs.append(_f("r", op[1]))
        else:
            nodes.append(N(op, [last], [f"y{k + 1}"]))
        last = f"y{k + 1}"
    nodes.append(N("Identity", [last], ["z"]))
    return _model(nodes, inputs, inits)


CASES = {
    # U-Net's 2x upsampling: every phase one tap, inside the input: the rows read in place
    "k2s2_in_place": _convt([1, 16, 12, 12], [16, 8, 2, 2], 8, strides=[2, 2]),
    # k=4 s=2 p=1: two taps a phase, offsets -1..1, the line buffer; the Add of a skip
    "k4s2p1_add": _convt([1, 8, 6, 7], [8, 12, 4, 4], 12, ("Relu", ("Add", [1, 12, 12, 14])),
                         strides=[2, 2], pads=[1, 1, 1, 1]),
    # pads larger than the stride, unequal, and output_padding (a phase's count one more)
    "pads_past_stride": _convt([2, 3, 5, 9], [3, 5, 5, 4], 5, strides=[2, 3],
                               pads=[3, 4, 1, 2], output_padding=[1, 2]),
    # s does not divide k: phases of unequal taps; a narrow row (VEC columns computed)
    "k3s2_narrow": _convt([1, 4, 3, 3], [4, 6, 3, 3], None, ("Sigmoid",), strides=[2, 2]),
    # dilation 2 with stride 2: gcd 2, so odd phases have no tap (the bias through the chain)
    "dilated_empty_phases": _convt([1, 3, 6, 6], [3, 4, 3, 3], 4, strides=[2, 2],
                                   dilations=[2, 2], pads=[1, 1, 1, 1]),
    # dilation 3 with stride 2 (coprime): every phase reached, taps spaced
    "dilated_coprime": _convt([1, 3, 5, 8], [3, 4, 3, 2], 4, strides=[2, 2],
                              dilations=[3, 3], pads=[2, 0, 1, 1]),
    # groups, lanes not dividing the group's channels (a last block zero-padded)
    "grouped": _convt([1, 6, 5, 11], [6, 5, 4, 4], 15, ("Tanh",), group=3, strides=[2, 2],
                      pads=[1, 1, 1, 1]),
    # 1-D: an audio decoder's k=16 s=8
    "audio_1d": _convt([1, 8, 40], [8, 6, 16], 6, ("Relu",), strides=[8], pads=[4, 4]),
    # 1-D past LINE_FLOATS: the row in segments, the line buffer refilled for each
    "audio_1d_segments": _convt([1, 160, 220], [160, 4, 4], 4, strides=[2], pads=[1, 1]),
    # output_shape given (the pads ONNX derives from it), SAME_UPPER's split
    "output_shape": _convt([1, 4, 5, 5], [4, 3, 3, 3], 3, strides=[2, 2], output_shape=[10, 10]),
    "output_shape_upper": _convt([1, 4, 5, 5], [4, 3, 3, 3], 3, strides=[2, 2],
                                 output_shape=[10, 8], auto_pad="SAME_UPPER"),
    # stride 1, and a stride larger than the kernel (k < s: phases without taps)
    "stride1": _convt([1, 5, 6, 6], [5, 7, 3, 3], 7, pads=[1, 1, 1, 1]),
    "k1s3": _convt([1, 4, 4, 5], [4, 9, 1, 1], 9, strides=[3, 3]),
    # one output channel a group: the column phases as the tile's lanes (FCN's upsampling)
    "depthwise_phase_lanes": _convt([1, 5, 6, 7], [5, 1, 4, 4], 5, group=5, strides=[2, 3],
                                    pads=[1, 2, 1, 0]),
    "depthwise_dilated_1d": _convt([1, 3, 30], [3, 1, 3], None, ("Tanh",), group=3,
                                   strides=[4], dilations=[2], pads=[1, 1]),
    "depthwise_segments": _convt([1, 200, 150], [200, 1, 4], None, group=200, strides=[2],
                                 pads=[1, 1]),
    "one_channel_k8s8": _convt([2, 4, 9, 3], [4, 1, 8, 8], 1, strides=[8, 8], pads=[2, 0, 2, 0]),
    # two images; a weight that is a runtime input (packed by C at the kernel's start), two
    # groups of 6 channels in blocks of 2
    "runtime_weights": _model(
        [N("ConvTranspose", ["x", "wr", "b"], ["y0"], strides=[2, 2], pads=[1, 1, 1, 1],
           group=2), N("Relu", ["y0"], ["z"])],
        [_f("x", [2, 4, 5, 6]), _f("wr", [4, 6, 4, 4])], [_w("b", [12], 1)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_convt_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.onnx"
    onnx.save(CASES[case], path)
    for target in ("x86-host", "cortex-m4"):  # a vector unit and a scalar FPU (host-built C)
        report = validate_c(path, target, outdir=tmp_path / target)
        assert report.ok, report
        for out in report.outputs:
            assert out.max_abs_err <= 1e-4 * out.max_ref + 1e-6, out


@pytest.mark.parametrize("out,k,s,d,p", [(13, 4, 2, 1, 1), (17, 3, 3, 2, 4), (9, 2, 4, 1, 0),
                                         (20, 5, 2, 2, 3), (7, 16, 8, 1, 4)])
def test_phases_cover_the_transposed_conv(out: int, k: int, s: int, d: int, p: int) -> None:
    """Every (input, tap) pair that lands on an output lands there through its phase, once."""
    size = 12
    want = sorted((i * s + j * d - p, i, j) for i in range(size) for j in range(k)
                  if 0 <= i * s + j * d - p < out)
    got = sorted((q * s + ph.r, q + e, j) for ph in axis_phases(out, k, s, d, p)
                 for q in range(ph.count) for j, e in ph.taps if 0 <= q + e < size)
    assert got == want


def test_convt_work_is_the_hand_count(tmp_path: Path) -> None:
    """The float cost model counts the C's phases (cost/fwork.convt_work), by hand here."""
    from opfuse.cost.fwork import float_kernel_work
    from opfuse.pipeline import compile_model

    def work(model: onnx.ModelProto) -> list[tuple]:
        onnx.save(model, tmp_path / "m.onnx")
        nodes = [n for n in compile_model(str(tmp_path / "m.onnx"), "cortex-m7").optimized.graph
                 if n.op_type == "ConvTranspose"]
        return [(w.path, w.lane_macs, w.outputs, w.loops) for w in float_kernel_work(nodes, True)]

    # 8 -> 12 channels, 4x4 stride 2 pad 1 from 6x7 (12x14 out): 2 x 2 phases of 2 x 2 taps,
    # 6 rows x 7 columns each (8 computed: VEC); tiles of 8 lanes, two blocks (16 summed); a
    # loop per phase row, block and input channel; a line buffer of 3 rows x (8 + 2) columns of
    # 8 channels per row group
    assert work(_convt([1, 8, 6, 7], [8, 12, 4, 4], 12, (), strides=[2, 2], pads=[1, 1, 1, 1])) \
        == [("columns", 2 * 6 * 2 * 2 * 8 * 8 * 8 * 4, 12 * 12 * 14, 2 * 6 * 2 * 2 * 8),
            ("line", 0, 6 * 8 * 3 * 10, 0)]
    # one channel a group: the 2 column phases are the lanes, over the union of their offsets
    # (-1, 0, 1): per row phase 4 rows x 3 groups x 2 lanes x 8 columns x 2 x 3 taps
    assert work(_convt([1, 3, 4, 4], [3, 1, 4, 4], None, (), group=3, strides=[2, 2],
                       pads=[1, 1, 1, 1])) == [
        ("columns", 2 * 4 * 3 * 2 * 8 * 2 * 3, 3 * 8 * 8, 2 * 4 * 3), ("line", 0, 4 * 3 * 3 * 10, 0)]
    # a 2x2 stride-2 upsampling reads its rows in place: no line buffer
    assert [w[0] for w in work(_convt([1, 4, 8, 8], [4, 4, 2, 2], None, (), strides=[2, 2]))] \
        == ["columns"]


@pytest.mark.parametrize("case", ["k4s2p1_add", "k3s2_narrow", "audio_1d_segments",
                                  "depthwise_segments",
                                  "depthwise_phase_lanes", "runtime_weights", "dilated_empty_phases"])
def test_convt_sanitizers(case: str, tmp_path: Path) -> None:
    """The line buffer, the segments, the merged lanes' reads past a phase's end and the
    runtime weights' stack copy stay in bounds (ASan + UBSan)."""
    from opfuse.backends.c import emit_c
    from opfuse.pipeline import compile_model
    from tests.helpers.sanitize import sanitized_run_matches

    path = tmp_path / f"{case}.onnx"
    onnx.save(CASES[case], path)
    emit_c(compile_model(path), tmp_path / "c")
    sanitized_run_matches(tmp_path / "c", path)
