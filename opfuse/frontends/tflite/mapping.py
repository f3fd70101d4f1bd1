"""The one table from TFLite builtin ops to their importers (the ONNX nodes each becomes)."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.frontends.tflite import ops_basic as B
from opfuse.frontends.tflite import ops_conv as C
from opfuse.frontends.tflite import ops_lstm
from opfuse.frontends.tflite import ops_shape as S
from opfuse.frontends.tflite.graph import Graph
from opfuse.frontends.tflite.reader import Operator

Importer = Callable[[Graph, Operator], None]

IMPORTERS: dict[str, Importer] = {
    "CONV_2D": C.conv_2d,
    "DEPTHWISE_CONV_2D": C.depthwise_conv_2d,
    "TRANSPOSE_CONV": C.transpose_conv,
    "FULLY_CONNECTED": C.fully_connected,
    "ADD": B.binary("Add"),
    "SUB": B.binary("Sub"),
    "MUL": B.binary("Mul"),
    "MEAN": B.mean,
    "AVERAGE_POOL_2D": B.pool("AveragePool"),
    "MAX_POOL_2D": B.pool("MaxPool"),
    "SOFTMAX": B.softmax,
    "LOGISTIC": B.unary("Sigmoid"),
    "TANH": B.unary("Tanh"),
    "RELU": B.unary("Relu"),
    "RELU6": B.clip(0.0, 6.0),
    "RELU_N1_TO_1": B.clip(-1.0, 1.0),
    "LEAKY_RELU": B.leaky_relu,
    "PRELU": B.prelu,
    "HARD_SWISH": B.unary("HardSwish"),
    "PAD": B.pad,
    "PADV2": B.pad,
    "RESHAPE": S.reshape,
    "SQUEEZE": S.reshape,
    "EXPAND_DIMS": S.reshape,
    "CONCATENATION": B.concatenation,
    "TRANSPOSE": S.transpose,
    "RESIZE_BILINEAR": S.resize_bilinear,
    "RESIZE_NEAREST_NEIGHBOR": S.resize_nearest,
    "DEPTH_TO_SPACE": S.depth_to_space,
    "STRIDED_SLICE": S.strided_slice,  # computed bounds (constant ones fold, fold.py)
    "QUANTIZE": B.quantize,
    "DEQUANTIZE": B.dequantize,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ops_lstm.unidirectional_sequence_lstm,
    "CUSTOM": S.custom,
}
