"""Hand-written QDQ ONNX graphs for unit tests of the fold, the passes and the partitioner.

Each graph is valid float ONNX with QuantizeLinear/DequantizeLinear around its ops, the form
docs/architecture.md ("int8 in the IR") says every frontend produces; onnxruntime runs it as the
reference.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class QDQGraph:
    def __init__(self, shape: tuple[int, ...], scale: float = 0.05, zero_point: int = 10) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shape = shape
        self.rng = np.random.default_rng(0)
        self.count = 0
        self.x = self.q("x", scale, zero_point)  # float graph input -> int8

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, array: np.ndarray, base: str = "c") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def q(self, x: str, scale: float, zp: int, dtype=np.int8) -> str:
        out = self.name("q")
        s, z = self.const(np.float32(scale), "s"), self.const(dtype(zp), "z")
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [out], name=self.name("Q")))
        return out

    def dq(self, x: str, scale, zp, axis: int | None = None) -> str:
        out = self.name("dq")
        scale = np.asarray(scale, np.float32)
        s, z = self.const(scale, "s"), self.const(np.asarray(zp), "z")
        attrs = {"axis": axis} if axis is not None else {}
        self.nodes.append(helper.make_node("DequantizeLinear", [x, s, z], [out], name=self.name("DQ"), **attrs))
        return out

    def act(self, x_q: str, scale: float, zp: int) -> str:
        """DQ of an int8 activation written by Q(scale, zp)."""
        return self.dq(x_q, np.float32(scale), np.int8(zp))

    def weight(self, shape: tuple[int, ...]) -> tuple[str, np.ndarray]:
        """A per-channel (axis 0) int8 weight behind DQ; returns (float name, scales)."""
        w = self.rng.integers(-127, 128, shape).astype(np.int8)
        scales = (self.rng.random(shape[0]) * 0.01 + 0.002).astype(np.float32)
        name = self.const(w, "w")
        return self.dq(name, scales, np.zeros(shape[0], np.int8), axis=0), scales

    def bias(self, scales: np.ndarray) -> str:
        b = self.rng.integers(-500, 500, scales.shape).astype(np.int32)
        return self.dq(self.const(b, "b"), scales, np.zeros(scales.shape, np.int32), axis=0)

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(op_type), **attrs))
        return out

    def conv(self, x: str, x_scale: float, cin: int, cout: int, k: int = 3, **attrs) -> str:
        w, ws = self.weight((cout, cin, k, k))
        return self.op("Conv", [x, w, self.bias(ws * np.float32(x_scale))], **attrs)

    def model(self, y: str, props: dict[str, str] | None = None) -> onnx.ModelProto:

        for node in self.nodes:  # the last DQ writes the graph output "y"
            node.output[:] = ["y" if o == y else o for o in node.output]
            node.input[:] = ["y" if i == y else i for i in node.input]
        graph = helper.make_graph(
            self.nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(self.shape))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], self.inits,
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        for key, value in (props or {}).items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        onnx.checker.check_model(onnx.shape_inference.infer_shapes(model), full_check=True)
        return model


def conv_relu(props: dict[str, str] | None = None, clamp: str = "Relu") -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv -> Relu|Clip(0, 6) -> Q -> DQ -> y."""
    g = QDQGraph((1, 4, 8, 8))
    c = g.conv(g.act(g.x, 0.05, 10), 0.05, 4, 8, pads=[1, 1, 1, 1])
    if clamp == "Relu":
        r = g.op("Relu", [c])
    else:
        r = g.op("Clip", [c, g.const(np.float32(0.0)), g.const(np.float32(6.0))])
    return g.model(g.act(g.q(r, 0.04, -128), 0.04, -128), props)
