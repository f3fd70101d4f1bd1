"""A MobileNetV3-style int8 test model (squeeze-excite, hard-swish), as float ONNX for
onnxruntime's ``quantize_static`` and as an int8 ``.tflite`` written with ``tests/helpers/tflite_builder.py``.

The blocks follow MobileNetV3's (Howard et al. 2019, "Searching for MobileNetV3", Fig. 4 and
Table 2): a stem conv with hard-swish; an inverted residual whose depthwise output is scaled by a
squeeze-excite branch (GlobalAveragePool -> 1x1 conv -> ReLU -> 1x1 conv -> HardSigmoid -> Mul with
the block's tensor), then a linear projection; a second block with hard-swish and a residual add;
a 1x1 conv with hard-swish, a global pool and a classifier.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZE = 48  # input 1x3x48x48: the stem's stride 2 gives the [1, 16, 24, 24] of issue 18
N = helper.make_node


class _Float:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def _name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def init(self, array: np.ndarray, base: str) -> str:
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self._name(op.lower())
        self.nodes.append(N(op, inputs, [out], name=self._name(op), **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1, group: int = 1) -> str:
        fan = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan)
        b = self.rng.standard_normal(cout) * 0.1
        p = k // 2
        return self.node("Conv", [x, self.init(w, "w"), self.init(b, "b")], kernel_shape=[k, k],
                         strides=[stride, stride], pads=[p, p, p, p], group=group)

    def hard_sigmoid(self, x: str) -> str:
        """relu6(x + 3) / 6, as Keras's MobileNetV3 writes it (every op has an int8 kernel)."""
        y = self.node("Add", [x, self.init(np.float32(3), "three")])
        y = self.node("Clip", [y, self.init(np.float32(0), "zero"), self.init(np.float32(6), "six")])
        return self.node("Mul", [y, self.init(np.float32(1 / 6), "sixth")])

    def hard_swish(self, x: str) -> str:
        return self.node("Mul", [x, self.hard_sigmoid(x)])

    def squeeze_excite(self, x: str, c: int, mid: int) -> str:
        s = self.node("GlobalAveragePool", [x])
        s = self.node("Relu", [self.conv(s, c, mid)])
        return self.node("Mul", [x, self.hard_sigmoid(self.conv(s, mid, c))])


def float_model(seed: int = 0, classes: int = 10) -> onnx.ModelProto:
    """The float ONNX model (NCHW, 1x3x48x48 -> 1 x classes)."""
    f = _Float(seed)
    x = f.hard_swish(f.conv("x", 3, 16, 3, 2))  # stem, 24x24
    y = f.node("Relu", [f.conv(x, 16, 16, 3, 1, group=16)])  # block 1: dw, SE, project
    y = f.conv(f.squeeze_excite(y, 16, 8), 16, 16)
    x = f.node("Add", [x, y])
    y = f.hard_swish(f.conv(x, 16, 48))  # block 2: expand, dw s2, SE, project
    y = f.hard_swish(f.conv(y, 48, 48, 3, 2, group=48))
    y = f.conv(f.squeeze_excite(y, 48, 16), 48, 24)
    y = f.hard_swish(f.conv(y, 24, 64))
    y = f.node("Flatten", [f.node("GlobalAveragePool", [y])])
    w = f.rng.standard_normal((classes, 64)) * np.sqrt(1.0 / 64)
    f.node("Gemm", [y, f.init(w, "fc"), f.init(np.zeros(classes), "fcb")], transB=1)
    f.nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        f.nodes, "mobilenet_v3_style",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])], f.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return onnx.shape_inference.infer_shapes(model)


# --- the int8 .tflite ------------------------------------------------------------------------
# Two passes over one network description: ``_Calibrate`` evaluates it in float (NHWC, numpy) on
# seeded inputs and records every tensor's range; ``_Write`` writes the TFLite operators with
# int8 tensors quantized on those ranges (asymmetric activations, symmetric per-channel weights,
# int32 bias at s_in * s_w), as TFLite's post-training quantizer does.


def _conv_nhwc(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, depthwise: bool):
    """TFLite CONV_2D / DEPTHWISE_CONV_2D with SAME padding (w: OHWI, or 1HWC for depthwise)."""
    from opfuse.models.graph import conv_ref

    k = w.shape[1]
    h = x.shape[1]
    out = -(-h // stride)
    total = max((out - 1) * stride + k - h, 0)
    pads = (total // 2, total // 2, total - total // 2, total - total // 2)
    xn = x.transpose(0, 3, 1, 2)
    wn = w.transpose(3, 0, 1, 2) if depthwise else w.transpose(0, 3, 1, 2)
    y = conv_ref(xn, wn, b, (stride, stride), pads, xn.shape[1] if depthwise else 1)
    return y.transpose(0, 2, 3, 1)


def _hswish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3, 0, 6) / 6


class _Net:
    """The network, on whatever ``ops`` computes (float arrays or TFLite tensors)."""

    def __init__(self, seed: int, classes: int) -> None:
        rng = np.random.default_rng(seed)
        self.weights: list[tuple[np.ndarray, np.ndarray]] = []

        def conv(cin: int, cout: int, k: int, depthwise: bool = False) -> None:
            fan = k * k if depthwise else cin * k * k
            shape = (1, k, k, cout) if depthwise else (cout, k, k, cin)
            self.weights.append((rng.standard_normal(shape) * np.sqrt(2.0 / fan),
                                 rng.standard_normal(cout) * 0.1))

        for spec in [(3, 16, 3), (16, 16, 3, True), (16, 8, 1), (8, 16, 1), (16, 16, 1),
                     (16, 48, 1), (48, 48, 3, True), (48, 16, 1), (16, 48, 1), (48, 24, 1),
                     (24, 64, 1)]:
            conv(*spec)
        self.fc = (rng.standard_normal((classes, 64)) * np.sqrt(1.0 / 64), np.zeros(classes))

    def run(self, ops, x):  # noqa: ANN001, ANN201 (ops: _Calibrate or _Write)
        w = iter(self.weights)

        def se(y):  # noqa: ANN001, ANN202
            s = ops.mean(y)
            s = ops.conv(s, next(w), 1, act="relu")
            s = ops.conv(s, next(w), 1)
            s = ops.mul(ops.add_const(s, 3.0, act="relu6"), 1 / 6)  # relu6(x + 3) / 6
            return ops.mul(y, s)

        x = ops.hard_swish(ops.conv(x, next(w), 2))  # stem: 24x24
        y = ops.conv(x, next(w), 1, depthwise=True, act="relu")
        y = ops.conv(se(y), next(w), 1)
        x = ops.add(x, y)
        y = ops.hard_swish(ops.conv(x, next(w), 1))
        y = ops.hard_swish(ops.conv(y, next(w), 2, depthwise=True))
        y = ops.conv(se(y), next(w), 1)
        y = ops.hard_swish(ops.conv(y, next(w), 1))
        return ops.fc(ops.mean(y), self.fc)


class _Calibrate:
    """Float evaluation; ``ranges[i]`` is the (min, max) of the i-th tensor made, 0 included."""

    def __init__(self) -> None:
        self.ranges: list[tuple[float, float]] = []
        self.i = 0

    def _keep(self, y: np.ndarray) -> np.ndarray:
        lo, hi = min(float(y.min()), 0.0), max(float(y.max()), 0.0)
        if self.i == len(self.ranges):
            self.ranges.append((lo, hi))
        else:
            a, b = self.ranges[self.i]
            self.ranges[self.i] = (min(a, lo), max(b, hi))
        self.i += 1
        return y

    def conv(self, x, wb, stride, depthwise=False, act=None):  # noqa: ANN001, ANN201
        y = _conv_nhwc(x, wb[0], wb[1], stride, depthwise)
        return self._keep(np.maximum(y, 0) if act == "relu" else y)

    def hard_swish(self, x):  # noqa: ANN001, ANN201
        return self._keep(_hswish(x))

    def mean(self, x):  # noqa: ANN001, ANN201
        return self._keep(x.mean(axis=(1, 2), keepdims=True))

    def add_const(self, x, c, act=None):  # noqa: ANN001, ANN201
        return self._keep(np.clip(x + c, 0, 6) if act == "relu6" else x + c)

    def mul(self, x, y):  # noqa: ANN001, ANN201
        return self._keep(x * y)

    def add(self, x, y):  # noqa: ANN001, ANN201
        return self._keep(x + y)

    def fc(self, x, wb):  # noqa: ANN001, ANN201
        return self._keep(x.reshape(1, -1) @ wb[0].T + wb[1])


def _qparams(lo: float, hi: float) -> tuple[float, int]:
    scale = (hi - lo) / 255 or 1.0
    return scale, int(np.clip(round(-128 - lo / scale), -128, 127))


class _Write:
    """TFLite int8 operators; tensor ``i`` gets the parameters of calibrated range ``i``."""

    def __init__(self, b, ranges: list[tuple[float, float]]) -> None:  # noqa: ANN001
        self.b, self.ranges, self.i, self.shapes, self.q = b, ranges, 0, {}, {}

    def tensor(self, shape) -> int:  # noqa: ANN001
        scale, zp = _qparams(*self.ranges[self.i])
        t = self.b.tensor(f"t{self.i}", shape, np.int8, scale=scale, zero_point=zp)
        self.i += 1
        self.shapes[t], self.q[t] = tuple(shape), (scale, zp)
        return t

    def input(self, shape, lo: float, hi: float) -> int:  # noqa: ANN001
        scale, zp = _qparams(lo, hi)
        t = self.b.input("x", shape, np.int8, scale=scale, zero_point=zp)
        self.shapes[t], self.q[t] = tuple(shape), (scale, zp)
        return t

    def _weights(self, w: np.ndarray, axis: int, x: int):  # noqa: ANN202
        other = tuple(a for a in range(w.ndim) if a != axis)
        sw = np.maximum(np.abs(w).max(axis=other), 1e-8) / 127
        shape = [1] * w.ndim
        shape[axis] = -1
        wq = np.clip(np.round(w / sw.reshape(shape)), -127, 127).astype(np.int8)
        return wq, sw, self.q[x][0] * sw

    def conv(self, x, wb, stride, depthwise=False, act=None):  # noqa: ANN001, ANN201
        w, bias = wb
        wq, sw, sb = self._weights(w, 3 if depthwise else 0, x)
        n, h, wd, _ = self.shapes[x]
        cout = w.shape[3] if depthwise else w.shape[0]
        wt = self.b.const(f"w{self.i}", wq, scale=sw, zero_point=0, axis=3 if depthwise else 0)
        bt = self.b.const(f"b{self.i}", np.round(bias / sb).astype(np.int32), scale=sb,
                          zero_point=0, axis=0)
        y = self.tensor((n, -(-h // stride), -(-wd // stride), cout))
        fields = dict(Padding=0, StrideH=stride, StrideW=stride, DilationHFactor=1,
                      DilationWFactor=1, FusedActivationFunction=1 if act == "relu" else 0)
        if depthwise:
            self.b.op("DEPTHWISE_CONV_2D", [x, wt, bt], [y], "DepthwiseConv2DOptions",
                      DepthMultiplier=1, **fields)
        else:
            self.b.op("CONV_2D", [x, wt, bt], [y], "Conv2DOptions", **fields)
        return y

    def hard_swish(self, x):  # noqa: ANN001, ANN201
        y = self.tensor(self.shapes[x])
        self.b.op("HARD_SWISH", [x], [y])
        return y

    def mean(self, x):  # noqa: ANN001, ANN201
        n, _, _, c = self.shapes[x]
        axes = self.b.const(f"axes{self.i}", np.array([1, 2], np.int32))
        y = self.tensor((n, 1, 1, c))
        self.b.op("MEAN", [x, axes], [y], "ReducerOptions", KeepDims=True)
        return y

    def _scalar(self, value: float) -> int:
        scale = abs(value) / 127 or 1.0
        return self.b.const(f"c{self.i}", np.array([round(value / scale)], np.int8), scale=scale,
                            zero_point=0)

    def add_const(self, x, c, act=None):  # noqa: ANN001, ANN201
        y = self.tensor(self.shapes[x])
        self.b.op("ADD", [x, self._scalar(c)], [y], "AddOptions",
                  FusedActivationFunction=3 if act == "relu6" else 0)
        return y

    def mul(self, x, y):  # noqa: ANN001, ANN201
        other = self._scalar(y) if isinstance(y, float) else y
        shape = self.shapes[x] if isinstance(y, float) else tuple(
            max(a, b) for a, b in zip(self.shapes[x], self.shapes[y], strict=True))
        out = self.tensor(shape)
        self.b.op("MUL", [x, other], [out], "MulOptions")
        return out

    def add(self, x, y):  # noqa: ANN001, ANN201
        out = self.tensor(self.shapes[x])
        self.b.op("ADD", [x, y], [out], "AddOptions")
        return out

    def fc(self, x, wb):  # noqa: ANN001, ANN201
        wq, sw, sb = self._weights(wb[0], 0, x)
        sw = np.full(1, sw.max())  # TFLite Micro's FULLY_CONNECTED: per-tensor weights
        wq = np.clip(np.round(wb[0] / sw[0]), -127, 127).astype(np.int8)
        sb = self.q[x][0] * sw
        wt = self.b.const(f"fc{self.i}", wq, scale=sw, zero_point=0)
        bt = self.b.const(f"fcb{self.i}", np.round(wb[1] / sb).astype(np.int32), scale=sb)
        out = self.tensor((1, wb[0].shape[0]))
        self.b.op("FULLY_CONNECTED", [x, wt, bt], [out], "FullyConnectedOptions")
        return out


def int8_tflite(path, seed: int = 0, classes: int = 10, samples: int = 4):  # noqa: ANN001, ANN201
    """The int8 .tflite (NHWC, 1x48x48x3 -> 1 x classes), calibrated on ``samples`` seeded
    inputs; written to ``path``, which is returned."""
    from tests.helpers.tflite_builder import TfliteBuilder

    net, calib = _Net(seed, classes), _Calibrate()
    rng = np.random.default_rng(seed + 1)
    xs = [rng.standard_normal((1, SIZE, SIZE, 3)) for _ in range(samples)]
    for x in xs:
        calib.i = 0
        net.run(calib, x)
    b = TfliteBuilder()
    ops = _Write(b, calib.ranges)
    x = ops.input((1, SIZE, SIZE, 3), min(float(min(a.min() for a in xs)), 0.0),
                  float(max(a.max() for a in xs)))
    b.output(net.run(ops, x))
    path.write_bytes(b.build())
    return path
