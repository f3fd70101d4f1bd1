"""The onnxruntime flavor: write kernels as com.microsoft FusedConv / FusedGemm.

onnxruntime fuses these itself at ORT_ENABLE_EXTENDED; emitting them lets it run our kernels fused
with its optimizer off, and adds one fusion its CPU optimizer does not make (the residual Add as
FusedConv's fourth input ``Z``). Rewrites, inside one kernel of the partition only:

* ``Conv [-> Add(Z)] [-> act]`` (or a two-input Sum) (at least one of the two) -> ``FusedConv(X, W, B, Z)``, computing
  ``act(conv(X, W) + B + Z)``; ``Z`` must have the conv output's shape (no broadcast in the kernel);
* ``Gemm -> act`` -> ``FusedGemm`` (same alpha/beta/trans attributes);
* ``MatMul(A, const B) -> Add(const C) [-> act]`` with 2-D A and B -> ``Gemm`` / ``FusedGemm``
  (onnxruntime's MatMulAddFusion).

act is one of Relu, Clip (constant bounds), LeakyRelu, Sigmoid, Tanh, HardSigmoid (Gemm: not Clip;
FusedGemm's CPU kernel has no clip). Only float32, as the CPU kernels; a value read twice or a graph
output is never folded away. BatchNorm and Pad folding, which onnxruntime also does at EXTENDED, are
done by the canonicalization passes before this stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

MS_DOMAIN = "com.microsoft"
CONV_ACTS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid")
GEMM_ACTS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid")
_FLT_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class _Match:
    anchor: onnx.NodeProto
    add: onnx.NodeProto | None
    extra: str | None  # Z for Conv, C for MatMul
    act: onnx.NodeProto | None
    act_params: tuple[float, ...]


class _Graph:
    """Lookups over a GraphProto: consumers, constants, shapes and element types."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(node)
        self.outputs = {v.name for v in graph.output}
        self.consts: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in graph.initializer
        }
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.name == "value":
                        self.consts[node.output[0]] = numpy_helper.to_array(attr.t)
        self.types: dict[str, tuple[int, tuple]] = {}
        for info in [*graph.input, *graph.value_info, *graph.output]:
            tensor = info.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
            self.types[info.name] = (tensor.elem_type, dims if tensor.HasField("shape") else None)
        for t in graph.initializer:
            self.types[t.name] = (t.data_type, tuple(t.dims))

    def is_float(self, name: str) -> bool:
        return self.types.get(name, (0, None))[0] == onnx.TensorProto.FLOAT

    def shape(self, name: str) -> tuple | None:
        return self.types.get(name, (0, None))[1]

    def sole_consumer(
        self, name: str, kernel: int, kernel_of: dict[str, int]
    ) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        if name in self.outputs or len(users) != 1 or users[0].domain not in ("", "ai.onnx"):
            return None
        return users[0] if kernel_of.get(users[0].name) == kernel else None


def _attr(node: onnx.NodeProto, name: str, default: float) -> float:
    for attr in node.attribute:
        if attr.name == name:
            return float(onnx.helper.get_attribute_value(attr))
    return default


def _act_params(
    g: _Graph, node: onnx.NodeProto, allowed: tuple[str, ...]
) -> tuple[float, ...] | None:
    """The activation's parameters in FusedConv's order, or None when it cannot be fused."""
    if node.op_type not in allowed:
        return None
    if node.op_type == "LeakyRelu":
        return (_attr(node, "alpha", 0.01),)
    if node.op_type == "HardSigmoid":
        return (_attr(node, "alpha", 0.2), _attr(node, "beta", 0.5))
    if node.op_type != "Clip":
        return ()
    bounds = []
    for pos, default in ((1, -_FLT_MAX), (2, _FLT_MAX)):
        name = node.input[pos] if len(node.input) > pos else ""
        if not name:
            bounds.append(_attr(node, ("min", "max")[pos - 1], default))  # opset < 11
        elif name in g.consts and g.consts[name].size == 1:
            bounds.append(float(g.consts[name].reshape(())))
        else:
            return None
    return tuple(bounds)


def _match(g: _Graph, node: onnx.NodeProto, kernel_of: dict[str, int]) -> _Match | None:
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Conv", "Gemm", "MatMul"):
        return None
    if not node.output or not g.is_float(node.output[0]):
        return None
    kernel = kernel_of[node.name]
    out = node.output[0]
    nxt = g.sole_consumer(out, kernel, kernel_of)
    add = extra = None
    if (
        nxt is not None
        and nxt.op_type in ("Add", "Sum")
        and len(nxt.input) == 2
        and out in nxt.input
    ):
        other = nxt.input[1] if nxt.input[0] == out else nxt.input[0]
        if other != out and g.is_float(other) and _add_fits(g, node, out, other):
            add, extra = nxt, other
            out = nxt.output[0]
            nxt = g.sole_consumer(out, kernel, kernel_of)
    if node.op_type == "MatMul" and add is None:
        return None
    acts = CONV_ACTS if node.op_type == "Conv" else GEMM_ACTS
    params = _act_params(g, nxt, acts) if nxt is not None else None
    act = nxt if params is not None else None
    if act is None and (add is None or node.op_type == "Gemm"):
        return None
    return _Match(node, add, extra, act, params or ())


def _add_fits(g: _Graph, anchor: onnx.NodeProto, out: str, other: str) -> bool:
    out_shape, other_shape = g.shape(out), g.shape(other)
    if anchor.op_type == "Conv":  # Z is added elementwise, no broadcast
        return out_shape is not None and None not in out_shape and other_shape == out_shape
    if anchor.op_type != "MatMul":
        return False
    a_shape = g.shape(anchor.input[0])
    b = g.consts.get(anchor.input[1])
    c = g.consts.get(other)
    if a_shape is None or len(a_shape) != 2 or b is None or b.ndim != 2 or c is None:
        return False
    n = b.shape[1]
    return c.shape in ((n,), (1, n))


def _fused_node(m: _Match, name: str) -> onnx.NodeProto:
    anchor, last = m.anchor, (m.act or m.add)
    assert last is not None
    attrs = [onnx.AttributeProto.FromString(a.SerializeToString()) for a in anchor.attribute]
    if anchor.op_type == "Conv":
        inputs = list(anchor.input) + [""] * (3 - len(anchor.input))
        node = onnx.helper.make_node(
            "FusedConv", [*inputs, m.extra or ""], [last.output[0]], name, domain=MS_DOMAIN
        )
        if not m.extra:
            del node.input[3:]
        node.attribute.extend(attrs)
        if m.act is not None:
            node.attribute.append(onnx.helper.make_attribute("activation", m.act.op_type))
            if m.act_params:
                node.attribute.append(
                    onnx.helper.make_attribute("activation_params", list(m.act_params))
                )
        return node
    inputs = [*anchor.input, m.extra] if anchor.op_type == "MatMul" else list(anchor.input)
    if m.act is None:
        return onnx.helper.make_node("Gemm", inputs, [last.output[0]], name)
    node = onnx.helper.make_node("FusedGemm", inputs, [last.output[0]], name, domain=MS_DOMAIN)
    node.attribute.extend(attrs)
    node.attribute.append(onnx.helper.make_attribute("activation", m.act.op_type))
    for key, value in zip(("activation_alpha", "activation_beta"), m.act_params, strict=False):
        node.attribute.append(onnx.helper.make_attribute(key, value))
    return node


def fuse_for_ort(graph: onnx.GraphProto, kernel_of: dict[str, int]) -> dict[str, int]:
    """Rewrite ``graph`` in place; new nodes join their kernel in ``kernel_of``.

    Returns how many nodes of each new op type were written (e.g. ``{"FusedConv": 35}``).
    """
    g = _Graph(graph)
    taken = {node.name for node in graph.node}
    replace: dict[str, onnx.NodeProto] = {}  # name of a match's last node -> fused node
    drop: set[str] = set()
    dead: set[str] = set()
    counts: dict[str, int] = {}
    for node in graph.node:
        if node.name in drop:
            continue
        m = _match(g, node, kernel_of)
        members = [n for n in (m.anchor, m.add, m.act) if n is not None] if m else []
        if m is None or any(n.name in drop or n.name in replace for n in members):
            continue  # an Add reading two convs of one kernel joins the first only
        name = f"{node.name}_ort"
        while name in taken:
            name += "_"
        taken.add(name)
        fused = _fused_node(m, name)
        replace[members[-1].name] = fused
        drop.update(n.name for n in members[:-1])
        dead.update(n.output[0] for n in members[:-1])
        kernel_of[name] = kernel_of[node.name]
        counts[fused.op_type] = counts.get(fused.op_type, 0) + 1
    if not counts:
        return counts
    nodes = [replace.get(n.name, n) for n in graph.node if n.name not in drop]
    del graph.node[:]
    graph.node.extend(nodes)
    infos = [v for v in graph.value_info if v.name not in dead]
    del graph.value_info[:]
    graph.value_info.extend(infos)
    return counts
