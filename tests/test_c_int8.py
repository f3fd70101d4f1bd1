"""int8 C kernels vs TFLite Micro, bit for bit: each case is one TFLite op (written with
tests/helpers/tflite_builder.py) and the same op as an int8 IR graph (tests/helpers/qgraphs.py, NCHW), run on 20
seeded random inputs; every element must be equal."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

from tests.helpers import qgraphs as q  # noqa: E402
from tests.helpers import tflite_builder as tb  # noqa: E402
from tests.helpers.c_int8 import (
    compare_with_tflm,
    conv_pair,
    int8_inputs,
    nchw,
    nhwc,
    out_geometry,
)
from tests.helpers.qgraphs import QGraph, run_c  # noqa: E402

# (H, W, C, OC, K, stride, padding, dilation, act, depthwise multiplier or None, seed)
CONV_CASES = {
    "3x3_s1_same_relu": (7, 9, 3, 8, 3, 1, "SAME", 1, "relu", None, 1),
    "3x3_s2_same_relu6": (9, 8, 5, 6, 3, 2, "SAME", 1, "relu6", None, 2),
    "3x3_s2_valid": (11, 10, 4, 5, 3, 2, "VALID", 1, None, None, 3),
    "5x5_s1_valid_odd": (13, 7, 3, 7, 5, 1, "VALID", 1, None, None, 4),
    "1x1": (6, 5, 16, 12, 1, 1, "VALID", 1, "relu", None, 5),
    "dilated": (10, 10, 3, 4, 3, 1, "SAME", 2, None, None, 6),
    "dw_s1_relu6": (9, 7, 8, 8, 3, 1, "SAME", 1, "relu6", 1, 7),
    "dw_s2_mult2": (10, 9, 3, 6, 3, 2, "SAME", 1, "relu", 2, 8),
    "dw_valid_5x5": (11, 11, 4, 4, 5, 2, "VALID", 1, None, 1, 9),
    # 16k output channels on short rows: the channel-vectorized path
    "lanes_16_relu": (6, 7, 8, 16, 3, 1, "SAME", 1, "relu", None, 10),
    "lanes_32_s2": (9, 9, 5, 32, 3, 2, "SAME", 1, "relu6", None, 11),
    "lanes_dw_mult16": (5, 6, 2, 32, 3, 1, "SAME", 1, None, 16, 12),
    "lanes_pointwise": (5, 5, 24, 16, 1, 1, "VALID", 1, "relu", None, 13),
    "pointwise_folded": (12, 12, 24, 16, 1, 1, "VALID", 1, None, None, 14),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_matches_tflite_micro(case: str) -> None:
    h, w_, c, *_, seed = CONV_CASES[case]
    p = conv_pair(*CONV_CASES[case])
    p.m.inputs, p.m.outputs = [p.x], [p.y]
    compare_with_tflm(p.m.build(), p.g.model(p.out), int8_inputs((1, h, w_, c), seed), nchw, nhwc)


@pytest.mark.parametrize("act", [None, "relu"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_fully_connected_matches_tflite_micro(act, per_channel) -> None:
    rng = np.random.default_rng(11 + per_channel)
    k, n = 37, 10
    sx, zx, sy, zy = 0.03, 7, 0.11, -4
    ws = (rng.uniform(0.002, 0.02, n) if per_channel else np.full(1, 0.01)).astype(np.float32)
    wt = rng.integers(-127, 128, (n, k)).astype(np.int8)
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, k), np.int8, sx, zx)
    wi = q.tensor(m, wt.shape, np.int8, ws, 0, 0, wt)
    bi = q.tensor(m, (n,), np.int32, sx * np.broadcast_to(ws, (n,)), 0, 0, bias)
    y = q.tensor(m, (1, n), np.int8, sy, zy)
    q.add_op(m, "FULLY_CONNECTED", [x, wi, bi], [y], q.fc_options(act))
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, k), sx, zx)
    out = g.op("Gemm", [xi, g.const(wt, ws, 0, axis=0 if per_channel else None),
                        g.const(bias, sx * ws, 0)], (1, n), sy, zy, transB=1)
    if act == "relu":
        out = g.op("Relu", [out], (1, n), sy, zy)
    ident = lambda a: a  # noqa: E731
    compare_with_tflm(m.build(), g.model(out), int8_inputs((1, k), 12), ident, ident)


BINARY = {
    "add": ("ADD", "Add", q.add_options, (0.05, 3, 0.02, -7, 0.06, 2)),
    "add_relu_big_ratio": ("ADD", "Add", q.add_options, (0.5, -3, 0.01, 9, 0.3, -1)),
    "sub": ("SUB", "Sub", q.sub_options, (0.05, 3, 0.04, -7, 0.08, 2)),
    "mul": ("MUL", "Mul", q.mul_options, (0.05, 3, 0.02, -7, 0.01, 2)),
}


@pytest.mark.parametrize("case", sorted(BINARY))
def test_binary_matches_tflite_micro(case: str) -> None:
    code, op, opts, (s1, z1, s2, z2, so, zo) = BINARY[case]
    act = "relu" if "relu" in case else None
    shape = (1, 5, 6, 3)
    m = tb.TfliteBuilder()
    a = q.tensor(m, shape, np.int8, s1, z1)
    b = q.tensor(m, shape, np.int8, s2, z2)
    y = q.tensor(m, shape, np.int8, so, zo)
    q.add_op(m, code, [a, b], [y], opts(act))
    m.inputs, m.outputs = [a, b], [y]
    g = QGraph()
    ai = g.input((1, 3, 5, 6), s1, z1)
    bi = g.input((1, 3, 5, 6), s2, z2)
    out = g.op(op, [ai, bi], (1, 3, 5, 6), so, zo)
    if act:
        out = g.op("Relu", [out], (1, 3, 5, 6), so, zo)
    model = g.model(out)
    xa, xb = int8_inputs(shape, 21), int8_inputs(shape, 22)
    ref = q.run_tflm(m.build(), [[p, q] for p, q in zip(xa, xb, strict=True)])
    got = run_c(model, [{ai.name: nchw(p), bi.name: nchw(q)} for p, q in zip(xa, xb,
                                                                          strict=True)])
    for r, c in zip(ref, got, strict=True):
        assert np.array_equal(r[0], nhwc(c[out.name]))


@pytest.mark.parametrize("kind", ["avg_same", "avg_valid", "max_same", "max_valid_relu"])
def test_pool_matches_tflite_micro(kind: str) -> None:
    h, w_, c, k, s = 9, 8, 5, 3, 2
    padding = "SAME" if "same" in kind else "VALID"
    oh, pt, pb = out_geometry(h, k, s, 1, padding)
    ow, pl, pr = out_geometry(w_, k, s, 1, padding)
    sx, zx = 0.07, -5
    act = "relu" if "relu" in kind else None
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w_, c), np.int8, sx, zx)
    y = q.tensor(m, (1, oh, ow, c), np.int8, sx, zx)
    code = "AVERAGE_POOL_2D" if kind.startswith("avg") else "MAX_POOL_2D"
    q.add_op(m, code, [x], [y], q.pool_options((k, k), (s, s), padding, act))
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, c, h, w_), sx, zx)
    op = "AveragePool" if kind.startswith("avg") else "MaxPool"
    out = g.op(op, [xi], (1, c, oh, ow), sx, zx, kernel_shape=[k, k], strides=[s, s],
               pads=[pt, pl, pb, pr])
    if act:
        out = g.op("Relu", [out], (1, c, oh, ow), sx, zx)
    compare_with_tflm(m.build(), g.model(out), int8_inputs((1, h, w_, c), 31), nchw, nhwc)


@pytest.mark.parametrize("same_params", [True, False])
def test_mean_matches_tflite_micro(same_params: bool) -> None:
    h, w_, c = 7, 6, 10
    sx, zx = 0.05, 3
    sy, zy = (sx, zx) if same_params else (0.02, -6)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w_, c), np.int8, sx, zx)
    axes = q.tensor(m, (2,), np.int32, data=np.array([1, 2], np.int32))
    y = q.tensor(m, (1, 1, 1, c), np.int8, sy, zy)
    q.add_op(m, "MEAN", [x, axes], [y], q.reducer_options(True))
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, c, h, w_), sx, zx)
    out = g.op("ReduceMean", [xi, g.const(np.array([2, 3], np.int64))], (1, c, 1, 1), sy, zy,
               keepdims=1)
    compare_with_tflm(m.build(), g.model(out), int8_inputs((1, h, w_, c), 41), nchw, nhwc)


@pytest.mark.parametrize("scale", [0.02, 0.1, 0.5])
def test_softmax_matches_tflite_micro(scale: float) -> None:
    n = 12
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, n), np.int8, scale, 4)
    y = q.tensor(m, (1, n), np.int8, 1.0 / 256, -128)
    q.add_op(m, "SOFTMAX", [x], [y], q.softmax_options(1.0))
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, n), scale, 4)
    out = g.op("Softmax", [xi], (1, n), 1.0 / 256, -128, axis=-1)
    ident = lambda a: a  # noqa: E731
    compare_with_tflm(m.build(), g.model(out), int8_inputs((1, n), 51), ident, ident)


def test_pad_value_is_the_zero_point() -> None:
    h, w_, c = 4, 5, 3
    sx, zx = 0.1, -17
    pads = np.array([[0, 0], [1, 2], [2, 0], [0, 0]], np.int32)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w_, c), np.int8, sx, zx)
    p = q.tensor(m, (4, 2), np.int32, data=pads)
    y = q.tensor(m, (1, h + 3, w_ + 2, c), np.int8, sx, zx)
    q.add_op(m, "PAD", [x, p], [y])
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, c, h, w_), sx, zx)
    out = g.op("Pad", [xi, g.const(np.array([0, 0, 1, 2, 0, 0, 2, 0], np.int64))],
               (1, c, h + 3, w_ + 2), sx, zx)
    compare_with_tflm(m.build(), g.model(out), int8_inputs((1, h, w_, c), 61), nchw, nhwc)


UNARY = {  # TFLite op, IR op, options, input (scale, zp), output (scale, zp)
    "logistic": ("LOGISTIC", "Sigmoid", None, (0.05, 3), (1 / 256, -128)),
    "logistic_wide": ("LOGISTIC", "Sigmoid", None, (0.2, -10), (1 / 256, -128)),
    "tanh": ("TANH", "Tanh", None, (0.03, -2), (1 / 128, 0)),
    "tanh_wide": ("TANH", "Tanh", None, (0.15, 7), (1 / 128, 0)),
    "hard_swish": ("HARD_SWISH", "HardSwish", None, (0.05, -20), (0.04, -90)),
    "hard_swish_2": ("HARD_SWISH", "HardSwish", None, (0.11, 10), (0.05, -60)),
    "leaky_relu": ("LEAKY_RELU", "LeakyRelu", q.leaky_relu_options(0.2), (0.05, 3),
                   (0.04, -10)),
}


@pytest.mark.parametrize("case", sorted(UNARY))
def test_unary_matches_tflite_micro(case: str) -> None:
    code, op, opts, (si, zi), (so, zo) = UNARY[case]
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, 256), np.int8, si, zi)
    y = q.tensor(m, (1, 256), np.int8, so, zo)
    q.add_op(m, code, [x], [y], opts)
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, 256), si, zi)
    attrs = {"alpha": 0.2} if op == "LeakyRelu" else {}
    out = g.op(op, [xi], (1, 256), so, zo, **attrs)
    every = [np.arange(-128, 128, dtype=np.int8).reshape(1, 256)]  # the whole table
    ident = lambda a: a  # noqa: E731
    compare_with_tflm(m.build(), g.model(out), every + int8_inputs((1, 256), 71)[:3], ident, ident)


def test_quantize_dequantize_match_tflite_micro() -> None:
    """QUANTIZE's roundf on the host C's vectorized form (isa/x86's ``roundf_fraction``: N
    spans whole vectors and a tail), on and between its ties and far outside the int8 range."""
    N = 520
    rng = np.random.default_rng(81)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, N), np.float32)
    qt = q.tensor(m, (1, N), np.int8, 0.037, -6)
    y = q.tensor(m, (1, N), np.float32)
    q.add_op(m, "QUANTIZE", [x], [qt])
    q.add_op(m, "DEQUANTIZE", [qt], [y])
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, N), dtype=np.float32)
    qi = g.op("QuantizeLinear", [xi], (1, N), 0.037, -6)
    out = g.op("DequantizeLinear", [qi], (1, N), dtype=np.float32)
    model = g.model(out)
    # values on and between the rounding ties of the quantizer
    xs = [(rng.integers(-300, 300, (1, N)) * 0.037 / 2).astype(np.float32) for _ in range(10)]
    xs += [rng.uniform(-6, 6, (1, N)).astype(np.float32) for _ in range(10)]
    xs += [rng.uniform(-1e6, 1e6, (1, N)).astype(np.float32) for _ in range(2)]
    ref = q.run_tflm(m.build(), [[a] for a in xs])
    got = run_c(model, [{xi.name: a} for a in xs])
    for r, c in zip(ref, got, strict=True):
        assert np.array_equal(r[0], c[out.name])


def test_concat_and_reshape_match_tflite_micro() -> None:
    m = tb.TfliteBuilder()
    a = q.tensor(m, (1, 3, 4, 2), np.int8, 0.05, 1)
    b = q.tensor(m, (1, 3, 4, 5), np.int8, 0.05, 1)
    y = q.tensor(m, (1, 3, 4, 7), np.int8, 0.05, 1)
    q.add_op(m, "CONCATENATION", [a, b], [y], q.concat_options(3))
    m.inputs, m.outputs = [a, b], [y]
    g = QGraph()
    ai = g.input((1, 2, 3, 4), 0.05, 1)
    bi = g.input((1, 5, 3, 4), 0.05, 1)
    out = g.op("Concat", [ai, bi], (1, 7, 3, 4), 0.05, 1, axis=1)
    flat = g.op("Reshape", [out, g.const(np.array([1, 84], np.int64))], (1, 84), 0.05, 1)
    model = g.model(flat)
    xa, xb = int8_inputs((1, 3, 4, 2), 91), int8_inputs((1, 3, 4, 5), 92)
    ref = q.run_tflm(m.build(), [[p, q] for p, q in zip(xa, xb, strict=True)])
    got = run_c(model, [{ai.name: nchw(p), bi.name: nchw(q)} for p, q in zip(xa, xb,
                                                                          strict=True)])
    for r, c in zip(ref, got, strict=True):
        assert np.array_equal(nchw(r[0]).reshape(1, 84), c[flat.name])


@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("size", [(9, 13), (3, 4)])
def test_resize_bilinear_matches_tflite_micro(ctm: str, size) -> None:
    h, w_, c = 5, 7, 3
    oh, ow = size
    sx, zx = 0.06, -9
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w_, c), np.int8, sx, zx)
    s = q.tensor(m, (2,), np.int32, data=np.array([oh, ow], np.int32))
    y = q.tensor(m, (1, oh, ow, c), np.int8, sx, zx)
    m.op("RESIZE_BILINEAR", [x, s], [y], "ResizeBilinearOptions",
         AlignCorners=ctm == "align_corners", HalfPixelCenters=ctm == "half_pixel")
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, c, h, w_), sx, zx)
    out = g.op("Resize", [xi, None, None, g.const(np.array([1, c, oh, ow], np.int64))],
               (1, c, oh, ow), sx, zx, mode="linear", coordinate_transformation_mode=ctm)
    compare_with_tflm(m.build(), g.model(out), int8_inputs((1, h, w_, c), 101), nchw, nhwc)
