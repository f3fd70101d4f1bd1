"""Write ops newer than the model's opset back out as the expressions they were recognised from.

Used wherever the canonicalized IR becomes an ONNX proto: the ONNX backend, and shape inference
(``shapes.py``), since onnx's checker and onnxruntime refuse an op the opset does not have.

Canonicalization turns GELU, SiLU and RMSNorm expressions into one ``Gelu`` (opset 20), ``Swish``
(opset 24) or ``RMSNormalization`` (opset 23) node so the partition counts them as one op
(``passes/gelu.py``, ``passes/swish.py``, ``passes/rmsnorm.py``). A model whose default-domain opset is older has
neither, and raising its opset import is not safe (ReduceMean, Split, Squeeze... changed their
signatures at 13 and 18). So such a node is written as standard nodes of the model's own opset (in
the ONNX backend, every one stamped with the kernel of the node it replaces):

    Gelu(x)               = (x * (1 + Erf(x / sqrt(2)))) * 0.5
    Gelu(x; tanh)         = (x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x * x * x)))) * 0.5
    Swish(x; alpha)       = x * Sigmoid(x * alpha)      (SiLU, alpha = 1: x * Sigmoid(x))
    RMSNormalization(x,w) = x / Sqrt(ReduceMean(x * x, last axis) + eps) * w

At opset 20 (24, 23) and later the node is kept (onnxruntime 1.32 runs Swish-24) (docs/architecture.md, "Transformer fusions").
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

GELU_OPSET = 20
SWISH_OPSET = 24
RMSNORM_OPSET = 23


def default_opset(proto: onnx.ModelProto) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def to_portable_proto(model: ir.Model) -> onnx.ModelProto:
    """``model`` as an ONNX proto that onnx and onnxruntime accept at the model's own opset."""
    proto = ir.to_proto(model)
    expand_new_ops(proto)
    return proto


def expand_new_ops(proto: onnx.ModelProto, kernel_of: dict[str, int] | None = None) -> int:
    """Replace the nodes the model's opset lacks; ``kernel_of`` (node name -> kernel index, the
    ONNX backend's) gains the new node names. Returns how many nodes were expanded."""
    opset = default_opset(proto)
    graph = proto.graph
    if not any(_builder(node, opset) for node in graph.node):
        return 0
    taken = {i.name for i in graph.initializer} | {v.name for v in graph.input}
    for node in graph.node:
        taken.add(node.name)
        taken.update(node.output)
    kept: list[onnx.NodeProto] = []
    expanded = 0
    for node in graph.node:
        builder = _builder(node, opset)
        if builder is None:
            kept.append(node)
            continue
        expansion = _Expansion(_Names(node, taken))
        builder(node, expansion, opset)
        graph.initializer.extend(expansion.consts)
        for new in expansion.nodes:
            if kernel_of is not None:
                kernel_of[new.name] = kernel_of[node.name]
            new.metadata_props.extend(node.metadata_props)
        kept.extend(expansion.nodes)
        expanded += 1
    if expanded:
        del graph.node[:]
        graph.node.extend(kept)
    return expanded


class _Names:
    """Fresh value, node and initializer names under the expanded node's name."""

    def __init__(self, node: onnx.NodeProto, taken: set[str]) -> None:
        self.base, self.taken, self.count = node.name or node.output[0], taken, 0

    def __call__(self, what: str) -> str:
        self.count += 1
        name = f"{self.base}/{what}_{self.count}"
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name


def _builder(node: onnx.NodeProto, opset: int):
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Gelu" and opset < GELU_OPSET:
        return _gelu
    if node.op_type == "Swish" and opset < SWISH_OPSET:
        return _swish
    if node.op_type == "RMSNormalization" and opset < RMSNORM_OPSET:
        return _rmsnorm
    return None


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class _Expansion:
    """The nodes and constants one expanded node becomes, named under it (``_Names``)."""

    def __init__(self, names: _Names) -> None:
        self.names = names
        self.nodes: list[onnx.NodeProto] = []
        self.consts: list[onnx.TensorProto] = []

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        out = out or self.names("v")
        self.nodes.append(helper.make_node(op_type, list(inputs), [out],
                                           name=self.names(op_type.lower()), **attrs))
        return out

    def const(self, array: np.ndarray, what: str = "c") -> str:
        name = self.names(what)
        self.consts.append(numpy_helper.from_array(array, name))
        return name

    def scalar(self, value: float) -> str:
        return self.const(np.array(value, np.float32))


def _gelu(node: onnx.NodeProto, e: _Expansion, opset: int) -> None:
    x, y = node.input[0], node.output[0]
    approximate = _attr(node, "approximate", b"none")
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    if approximate == "tanh":
        cube = e.op("Mul", e.op("Mul", x, x), x)
        inner = e.op("Add", x, e.op("Mul", cube, e.scalar(0.044715)))
        f = e.op("Tanh", e.op("Mul", inner, e.scalar(math.sqrt(2.0 / math.pi))))
    else:
        f = e.op("Erf", e.op("Div", x, e.scalar(math.sqrt(2.0))))
    total = e.op("Add", f, e.scalar(1.0))
    e.op("Mul", e.op("Mul", x, total), e.scalar(0.5), out=y)


def _swish(node: onnx.NodeProto, e: _Expansion, opset: int) -> None:
    x, y = node.input[0], node.output[0]
    alpha = float(_attr(node, "alpha", 1.0))
    arg = x if alpha == 1.0 else e.op("Mul", x, e.scalar(alpha))
    e.op("Mul", x, e.op("Sigmoid", arg), out=y)


def _rmsnorm(node: onnx.NodeProto, e: _Expansion, opset: int) -> None:
    x, w, y = node.input[0], node.input[1], node.output[0]
    eps = float(_attr(node, "epsilon", 1e-5))
    square = e.op("Mul", x, x)
    if opset >= 18:
        axes = e.const(np.array([-1], np.int64), "axes")
        mean = e.op("ReduceMean", square, axes, keepdims=1)
    else:
        mean = e.op("ReduceMean", square, axes=[-1], keepdims=1)
    root = e.op("Sqrt", e.op("Add", mean, e.scalar(eps)))
    e.op("Mul", e.op("Div", x, root), w, out=y)
