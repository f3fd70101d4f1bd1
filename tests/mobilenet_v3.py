"""A MobileNetV3-style int8 test model (squeeze-excite, hard-swish), as float ONNX for
onnxruntime's ``quantize_static`` and as an int8 ``.tflite`` written with ``tests/tflite_builder.py``.

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
