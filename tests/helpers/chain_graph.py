"""A tiny ONNX graph builder for single-input chains: x (1 x C x H x W) through the ops appended, y
at the end (tests/test_c_cascade_shapes.py, tests/test_cascade_reasons.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ChainGraph:
    """A tiny ONNX graph builder: x (1 x C x H x W) through the ops appended, y at the end."""

    def __init__(self, channels: int, height: int, width: int, opset: int = 17) -> None:
        self.rng = np.random.default_rng(3)
        self.nodes: list = []
        self.inits: list = []
        self.shape = [1, channels, height, width]
        self.cur, self.c, self.opset = "x", channels, opset
        self.inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.shape)]

    def _name(self, op: str) -> str:
        return f"{op.lower()}{len(self.nodes)}"

    def conv(self, out: int, k: tuple[int, int], pads=(0, 0, 0, 0), s=1, group=1, d=1) -> str:
        name = self._name("conv")
        w = self.rng.standard_normal((out, self.c // group, *k)).astype(np.float32)
        w /= np.sqrt(w[0].size)
        b = self.rng.standard_normal(out).astype(np.float32) * 0.1
        self.inits += [numpy_helper.from_array(w, name + "_w"),
                       numpy_helper.from_array(b, name + "_b")]  # fmt: skip
        self.nodes.append(helper.make_node(
            "Conv", [self.cur, name + "_w", name + "_b"], [name], name=name, kernel_shape=list(k),
            pads=list(pads), strides=[s, s], group=group, dilations=[d, d]))  # fmt: skip
        self.cur, self.c = name, out
        return name

    def op(self, op: str, *others: str, **attrs) -> str:  # noqa: ANN003
        name = self._name(op)
        self.nodes.append(helper.make_node(op, [self.cur, *others], [name], name=name, **attrs))
        self.cur = name
        return name

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def save(self, path: Path) -> Path:
        onnx.save(onnx.shape_inference.infer_shapes(self.model()), path)
        return path

    def model(self) -> onnx.ModelProto:
        if self.nodes[-1].name != "out":
            self.nodes.append(helper.make_node("Identity", [self.cur], ["y"], name="out"))
        graph = helper.make_graph(self.nodes, "g", self.inputs,
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  initializer=self.inits)  # fmt: skip
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
