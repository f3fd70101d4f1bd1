"""Every TFLite op the frontend maps, one small model each (tests/helpers/tflite_builder.py), run by TFLite
(LiteRT for float, TFLite Micro for int8) and by onnxruntime on the imported proto."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.tflite_builder import (
    RELU,
    RELU6,
    SAME,
    VALID,
    TfliteBuilder,
    check_against_tflite,
)

F32, I8 = np.float32, np.int8
RNG = np.random.default_rng(7)


def q(dtype, scale=0.05, zero_point=0):
    """Quantization keywords for an int8 tensor, none for float."""
    return {} if dtype == F32 else {"scale": scale, "zero_point": zero_point}


def weights(b, name, shape, dtype, axis=0):
    """Float weights, or int8 per-channel weights along ``axis`` (scale 0.01 + 0.001 c)."""
    if dtype == F32:
        return b.const(name, RNG.standard_normal(shape).astype(F32) * 0.3)
    scales = 0.01 + 0.001 * np.arange(shape[axis])
    return b.const(name, RNG.integers(-127, 128, shape).astype(I8), scale=scales, axis=axis)


def bias(b, name, n, dtype, in_scale=0.05, w_axis_len=None):
    if dtype == F32:
        return b.const(name, RNG.standard_normal(n).astype(F32))
    scales = in_scale * (0.01 + 0.001 * np.arange(n))
    return b.const(name, RNG.integers(-300, 300, n).astype(np.int32), scale=scales, axis=0)


def conv(b, dt, padding=SAME, stride=1, dilation=1):
    x = b.input("x", (1, 9, 10, 3), dt, **q(dt))
    y = b.tensor("y", (1, *([-(-9 // stride), -(-10 // stride)] if padding == SAME else
                           [(9 - 2 * dilation - 1) // stride + 1, (10 - 2 * dilation - 1) // stride + 1]),
                           4), dt, **q(dt, 0.1, 3))
    b.op("CONV_2D", [x, weights(b, "w", (4, 3, 3, 3), dt), bias(b, "b", 4, dt)], [y],
         "Conv2DOptions", Padding=padding, StrideH=stride, StrideW=stride,
         DilationHFactor=dilation, DilationWFactor=dilation, FusedActivationFunction=RELU6)
    return y


def dwconv(b, dt):
    x = b.input("x", (1, 8, 8, 3), dt, **q(dt))
    y = b.tensor("y", (1, 4, 4, 6), dt, **q(dt, 0.1, -2))
    b.op("DEPTHWISE_CONV_2D", [x, weights(b, "w", (1, 3, 3, 6), dt, axis=3), bias(b, "b", 6, dt)],
         [y], "DepthwiseConv2DOptions", Padding=SAME, StrideH=2, StrideW=2, DepthMultiplier=2,
         DilationHFactor=1, DilationWFactor=1, FusedActivationFunction=RELU)
    return y


def transpose_conv(b, dt, padding=SAME):
    x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
    out = (1, 8, 10, 2) if padding == SAME else (1, 9, 11, 2)
    shape = b.const("shape", np.asarray(out, np.int32))
    y = b.tensor("y", out, dt, **q(dt, 0.1, 1))
    b.op("TRANSPOSE_CONV", [shape, weights(b, "w", (2, 3, 3, 3), dt), x, bias(b, "b", 2, dt)],
         [y], "TransposeConvOptions", Padding=padding, StrideH=2, StrideW=2)
    return y


def fully_connected(b, dt, keep=False):
    x = b.input("x", (1, 2, 3, 4), dt, **q(dt))
    y = b.tensor("y", (1, 2, 3, 5) if keep else (6, 5), dt, **q(dt, 0.1, 0))
    b.op("FULLY_CONNECTED", [x, weights(b, "w", (5, 4), dt), bias(b, "b", 5, dt)], [y],
         "FullyConnectedOptions", FusedActivationFunction=RELU, KeepNumDims=keep)
    return y


def binary(opcode, options):
    def build(b, dt):
        x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
        c = (b.const("c", RNG.standard_normal(3).astype(F32)) if dt == F32 else
             b.const("c", RNG.integers(-100, 100, 3).astype(I8), scale=0.02, zero_point=0))
        h = b.tensor("h", (1, 4, 5, 3), dt, **q(dt, 0.1, 0))
        b.op("CONV_2D", [x, weights(b, "w", (3, 1, 1, 3), dt), bias(b, "b", 3, dt)], [h],
             "Conv2DOptions", Padding=SAME, StrideH=1, StrideW=1, DilationHFactor=1,
             DilationWFactor=1)
        y = b.tensor("y", (1, 4, 5, 3), dt, **q(dt, 0.1, 0))
        b.op(opcode, [h, c], [y], options)
        return y

    return build


def unary(opcode, options=None, out_q=(0.1, 0), **fields):
    def build(b, dt):
        x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
        y = b.tensor("y", (1, 4, 5, 3), dt, **q(dt, *out_q))
        b.op(opcode, [x], [y], options, **fields)
        return y

    return build


def pool(opcode):
    def build(b, dt):
        x = b.input("x", (1, 7, 8, 3), dt, **q(dt))
        y = b.tensor("y", (1, 4, 4, 3), dt, **q(dt))
        b.op(opcode, [x], [y], "Pool2DOptions", Padding=SAME, StrideH=2, StrideW=2,
             FilterHeight=3, FilterWidth=3)
        return y

    return build


def mean(keep):
    def build(b, dt):
        x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
        axes = b.const("axes", np.asarray([1, 2], np.int32))
        y = b.tensor("y", (1, 1, 1, 3) if keep else (1, 3), dt, **q(dt, 0.02, 1))
        b.op("MEAN", [x, axes], [y], "ReducerOptions", KeepDims=keep)
        return y

    return build


def pad(b, dt):
    x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
    pads = b.const("pads", np.asarray([[0, 0], [1, 2], [0, 1], [0, 0]], np.int32))
    y = b.tensor("y", (1, 7, 6, 3), dt, **q(dt))
    b.op("PAD", [x, pads], [y])
    return y


def padv2(b, dt):
    x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
    pads = b.const("pads", np.asarray([[0, 0], [1, 0], [2, 1], [0, 0]], np.int32))
    value = b.const("v", np.asarray([0.5], F32)) if dt == F32 else \
        b.const("v", np.asarray([7], I8), scale=0.05, zero_point=0)
    y = b.tensor("y", (1, 5, 8, 3), dt, **q(dt))
    b.op("PADV2", [x, pads, value], [y])
    return y


def reshape(b, dt):
    x = b.input("x", (1, 4, 6, 3), dt, **q(dt))
    h = b.tensor("h", (1, 4, 6, 3), dt, **q(dt, 0.1, 0))
    b.op("RELU", [x], [h])
    y = b.tensor("y", (1, 8, 3, 3), dt, **q(dt, 0.1, 0))
    b.op("RESHAPE", [h, b.const("s", np.asarray([1, 8, 3, 3], np.int32))], [y])
    return y


def squeeze(b, dt):
    x = b.input("x", (1, 1, 5, 3), dt, **q(dt))
    y = b.tensor("y", (1, 5, 3), dt, **q(dt))
    b.op("SQUEEZE", [x], [y], "SqueezeOptions", SqueezeDims=[1])
    return y


def concatenation(b, dt):
    x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
    z = b.input("z", (1, 4, 5, 2), dt, **q(dt))  # TFLite Micro: one scale on all sides
    y = b.tensor("y", (1, 4, 5, 5), dt, **q(dt))
    b.op("CONCATENATION", [x, z], [y], "ConcatenationOptions", Axis=3)
    return y


def transpose(b, dt):
    x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
    h = b.tensor("h", (1, 3, 4, 5), dt, **q(dt))
    b.op("TRANSPOSE", [x, b.const("p", np.asarray([0, 3, 1, 2], np.int32))], [h])
    y = b.tensor("y", (1, 3, 4, 5), dt, **q(dt, 0.1, 0))
    b.op("RELU", [h], [y])
    return y


def resize(opcode, options, align, half):
    def build(b, dt):
        x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
        y = b.tensor("y", (1, 7, 9, 3), dt, **q(dt))
        b.op(opcode, [x, b.const("size", np.asarray([7, 9], np.int32))], [y], options,
             AlignCorners=align, HalfPixelCenters=half)
        return y

    return build


def depth_to_space(b, dt):
    x = b.input("x", (1, 3, 4, 8), dt, **q(dt))
    y = b.tensor("y", (1, 6, 8, 2), dt, **q(dt))
    b.op("DEPTH_TO_SPACE", [x], [y], "DepthToSpaceOptions", BlockSize=2)
    return y


def prelu(b, dt):
    x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
    alpha = (b.const("a", np.asarray([[[0.1, 0.2, 0.3]]], F32)) if dt == F32 else
             b.const("a", np.asarray([[[10, 20, 30]]], I8), scale=0.01, zero_point=0))
    y = b.tensor("y", (1, 4, 5, 3), dt, **q(dt))
    b.op("PRELU", [x, alpha], [y])
    return y


def shape_arithmetic(b, dt):
    """RESHAPE whose new shape SHAPE -> STRIDED_SLICE -> PACK compute: folded at import."""
    x = b.input("x", (1, 4, 5, 3), dt, **q(dt))
    s = b.tensor("s", (4,), np.int32)
    b.op("SHAPE", [x], [s], "ShapeOptions", OutType=2)
    n = b.tensor("n", (), np.int32)
    ints = [b.const(k, np.asarray(v, np.int32)) for k, v in
            (("b0", [0]), ("e0", [1]), ("s0", [1]))]
    b.op("STRIDED_SLICE", [s, *ints], [n], "StridedSliceOptions", ShrinkAxisMask=1)
    shape = b.tensor("shape", (2,), np.int32)
    b.op("PACK", [n, b.const("m1", np.asarray(-1, np.int32))], [shape], "PackOptions",
         ValuesCount=2, Axis=0)
    y = b.tensor("y", (1, 60), dt, **q(dt))
    b.op("RESHAPE", [x, shape], [y])
    return y


def fp16_weights(b, dt):
    """Float16 weights behind DEQUANTIZE, folded to float32 initializers."""
    x = b.input("x", (1, 6, 6, 3), F32)
    w16 = b.const("w16", (RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float16))
    w = b.tensor("w", (4, 3, 3, 3), F32)
    b.op("DEQUANTIZE", [w16], [w])
    y = b.tensor("y", (1, 6, 6, 4), F32)
    b.op("CONV_2D", [x, w, b.const("b", np.zeros(4, F32))], [y], "Conv2DOptions",
         Padding=SAME, StrideH=1, StrideW=1, DilationHFactor=1, DilationWFactor=1)
    return y


def float_io_int8_inside(b, dt):
    """QUANTIZE in, DEQUANTIZE out (mcunet's pattern), an int8 conv between."""
    x = b.input("x", (1, 6, 6, 3), F32)
    xq = b.tensor("xq", (1, 6, 6, 3), I8, scale=0.05, zero_point=-1)
    b.op("QUANTIZE", [x], [xq])
    yq = conv_on(b, xq)
    y = b.tensor("y", (1, 6, 6, 4), F32)
    b.op("DEQUANTIZE", [yq], [y])
    return y


def conv_on(b, x):
    y = b.tensor("yq", (1, 6, 6, 4), I8, scale=0.1, zero_point=4)
    b.op("CONV_2D", [x, weights(b, "w", (4, 3, 3, 3), I8), bias(b, "b", 4, I8)], [y],
         "Conv2DOptions", Padding=SAME, StrideH=1, StrideW=1, DilationHFactor=1,
         DilationWFactor=1)
    return y


CASES = {
    "conv_same": conv, "conv_valid_stride2": lambda b, d: conv(b, d, VALID, 2),
    "conv_dilated": lambda b, d: conv(b, d, VALID, 1, 2),
    "depthwise_multiplier2": dwconv, "transpose_conv_same": transpose_conv,
    "transpose_conv_valid": lambda b, d: transpose_conv(b, d, VALID),
    "fully_connected_rank4": fully_connected,
    "fully_connected_keep_dims": lambda b, d: fully_connected(b, d, True),
    "add": binary("ADD", "AddOptions"), "sub": binary("SUB", "SubOptions"),
    "mul": binary("MUL", "MulOptions"), "mean_keep": mean(True), "mean": mean(False),
    "avg_pool": pool("AVERAGE_POOL_2D"), "max_pool": pool("MAX_POOL_2D"),
    "softmax_beta": unary("SOFTMAX", "SoftmaxOptions", (1 / 256, -128), Beta=0.7),
    "logistic": unary("LOGISTIC", out_q=(1 / 256, -128)),
    "tanh": unary("TANH", out_q=(1 / 128, 0)), "relu": unary("RELU"),
    "relu6": unary("RELU6", out_q=(0.05, 0)),  # TFLite Micro's int8 RELU6 does not rescale "relu_n1_to_1": unary("RELU_N1_TO_1", out_q=(1 / 128, 0)),
    "leaky_relu": unary("LEAKY_RELU", "LeakyReluOptions", Alpha=0.2),
    "hard_swish": unary("HARD_SWISH"), "prelu": prelu, "pad": pad, "padv2": padv2,
    "reshape": reshape, "squeeze": squeeze, "concatenation": concatenation,
    "transpose": transpose,
    "resize_bilinear": resize("RESIZE_BILINEAR", "ResizeBilinearOptions", False, False),
    "resize_bilinear_half": resize("RESIZE_BILINEAR", "ResizeBilinearOptions", False, True),
    "resize_bilinear_align": resize("RESIZE_BILINEAR", "ResizeBilinearOptions", True, False),
    "resize_nearest": resize("RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighborOptions", False, False),
    "resize_nearest_half": resize("RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighborOptions",
                                  False, True),
    "resize_nearest_align": resize("RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighborOptions",
                                   True, False),
    "depth_to_space": depth_to_space, "shape_arithmetic": shape_arithmetic,
}
FLOAT_ONLY = {"fp16_weights": fp16_weights}
INT8_ONLY = {"float_io_int8_inside": float_io_int8_inside}
NO_INT8 = {"relu_n1_to_1"}  # TFLite Micro has no kernel for it


def _build(tmp_path, name, fn, dtype):
    b = TfliteBuilder()
    b.output(fn(b, dtype))
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(b.build())
    return path


@pytest.mark.parametrize("name", sorted(CASES) + sorted(FLOAT_ONLY))
def test_float_op_matches_litert(tmp_path, name):
    path = _build(tmp_path, name, {**CASES, **FLOAT_ONLY}[name], F32)
    assert check_against_tflite(path, None).kind == "litert"


@pytest.mark.parametrize("name", sorted(set(CASES) - NO_INT8) + sorted(INT8_ONLY))
def test_int8_op_is_within_steps_of_tflite_micro(tmp_path, name):
    path = _build(tmp_path, name, {**CASES, **INT8_ONLY}[name], I8)
    assert check_against_tflite(path, 2).kind == "tflite-micro"
