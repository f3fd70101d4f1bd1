"""Rewrite ONNX's operator-form quantization (QLinearConv, QGemm, QLinearAdd...) into QDQ.

docs/architecture.md, "int8 in the IR": every frontend hands the importer QDQ, which the QDQ fold
then turns into quantized nodes. Each QOperator node becomes ``DQ(inputs) -> float op -> Q``:

    QLinearConv(x, sx, zx, w, sw, zw, sy, zy, b)   Conv(DQ(x), DQ(w; axis 0), DQ(b; sx*sw, 0)) -> Q(sy, zy)
    QLinearMatMul(a, sa, za, b, sb, zb, sy, zy)    MatMul(DQ(a), DQ(b; axis 1))               -> Q
    QGemm(a, sa, za, b, sb, zb, c, sy, zy)         Gemm(DQ(a), DQ(b), DQ(c; alpha*sa*sb, 0))  -> Q
                                                   (float output when sy is omitted)
    QLinearAdd / QLinearMul (a, sa, za, b, ...)    Add / Mul                                  -> Q
    QLinear{AveragePool,GlobalAveragePool,Sigmoid,LeakyRelu,Softmax}(x, sx, zx, sy, zy)   -> Q
    QLinearConcat(sy, zy, (x, sx, zx)...)          Concat(DQ(x)...)                            -> Q

The int32 bias scale is the product of the input and weight scales (zero point 0), as the
QOperator definitions say. Ops that move int8 data unchanged in this form (Reshape, MaxPool...)
are left as they are; the fold passes their input's parameters through.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from opfuse.errors import OpfuseError
from opfuse.fresh_names import fresh_name
from opfuse.frontends.qdq import FLOAT_SUFFIX

MS = "com.microsoft"
# op type -> float op for the single-input (x, sx, zx, sy, zy) forms
_UNARY = {
    "QLinearAveragePool": "AveragePool",
    "QLinearGlobalAveragePool": "GlobalAveragePool",
    "QLinearSigmoid": "Sigmoid",
    "QLinearLeakyRelu": "LeakyRelu",
    "QLinearSoftmax": "Softmax",
}
_BINARY = {"QLinearAdd": "Add", "QLinearMul": "Mul"}
QOPS = frozenset({"QLinearConv", "QLinearMatMul", "QGemm", "QLinearConcat", *_UNARY, *_BINARY})


def has_qoperators(proto: onnx.ModelProto) -> bool:
    return any(n.op_type in QOPS for n in proto.graph.node)


class _Rewriter:
    def __init__(self, graph: onnx.GraphProto, path: str) -> None:
        self.graph, self.path = graph, path
        self.inits = {t.name: t for t in graph.initializer}
        self.taken = {t.name for t in graph.initializer} | {i.name for i in graph.input}
        for node in graph.node:
            self.taken.update(node.output)
            self.taken.add(node.name)
        self.nodes: list[onnx.NodeProto] = []

    def fresh(self, base: str) -> str:
        return fresh_name(self.taken, base)

    def array(self, name: str, node: onnx.NodeProto) -> np.ndarray:
        if name not in self.inits:
            raise OpfuseError(f"{self.path}: {node.op_type} '{node.name}': '{name}' is not a constant")
        return numpy_helper.to_array(self.inits[name])

    def dq(self, x: str, scale: str, zp: str, axis: int | None = None) -> str:
        out = self.fresh(f"{x}_dq")
        attrs = {"axis": axis} if axis is not None else {}
        inputs = [x, scale] + ([zp] if zp else [])
        self.nodes.append(onnx.helper.make_node("DequantizeLinear", inputs, [out], name=self.fresh(f"{x}_dequantize"), **attrs))
        return out

    def q(self, x: str, scale: str, zp: str, out: str) -> None:
        inputs = [x, scale] + ([zp] if zp else [])
        self.nodes.append(onnx.helper.make_node("QuantizeLinear", inputs, [out], name=self.fresh(f"{out}_quantize")))

    def weight_axis(self, scale: str, node: onnx.NodeProto, axis: int) -> int | None:
        return axis if self.array(scale, node).size > 1 else None

    def bias(self, b: str, scales: np.ndarray, node: onnx.NodeProto) -> str:
        name = self.fresh(f"{b}_scale")
        s = np.asarray(scales, np.float32)
        self.graph.initializer.append(numpy_helper.from_array(s.reshape(()) if s.size == 1 else s.ravel(), name))
        zero = self.fresh(f"{b}_zero_point")
        n = self.array(b, node).shape[0]
        zp = np.zeros((), np.int32) if s.size == 1 else np.zeros((n,), np.int32)
        self.graph.initializer.append(numpy_helper.from_array(zp, zero))
        return self.dq(b, name, zero, 0 if s.size > 1 else None)

    def float_op(self, op_type: str, inputs: list[str], node: onnx.NodeProto, out: str | None = None,
                 domain: str = "", drop: tuple[str, ...] = ()) -> str:
        raw = out or self.fresh(f"{node.output[0]}{FLOAT_SUFFIX}")
        attrs = [a for a in node.attribute if a.name not in drop]
        new = onnx.helper.make_node(op_type, inputs, [raw], name=node.name or self.fresh(op_type), domain=domain)
        new.attribute.extend(attrs)
        self.nodes.append(new)
        return raw

    def rewrite(self, node: onnx.NodeProto) -> bool:
        op, i = node.op_type, list(node.input) + [""] * 9
        if node.domain not in ("", "ai.onnx", MS) or op not in QOPS:
            return False
        if any(a.name == "channels_last" and a.i for a in node.attribute):
            raise OpfuseError(f"{self.path}: {op} '{node.name}': channels_last=1 is not supported")
        y = node.output[0]
        if op == "QLinearConv":
            x = self.dq(i[0], i[1], i[2])
            w = self.dq(i[3], i[4], i[5], self.weight_axis(i[4], node, 0))
            ins = [x, w]
            if i[8]:
                ins.append(self.bias(i[8], self.array(i[1], node) * self.array(i[4], node), node))
            self.q(self.float_op("Conv", ins, node), i[6], i[7], y)
        elif op == "QLinearMatMul":
            a = self.dq(i[0], i[1], i[2])
            b = self.dq(i[3], i[4], i[5], self.weight_axis(i[4], node, 1))
            self.q(self.float_op("MatMul", [a, b], node), i[6], i[7], y)
        elif op == "QGemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            alpha = next((a.f for a in node.attribute if a.name == "alpha"), 1.0)
            a = self.dq(i[0], i[1], i[2])
            b = self.dq(i[3], i[4], i[5], self.weight_axis(i[4], node, 0 if trans_b else 1))
            ins = [a, b]
            if i[6]:
                scale = alpha * self.array(i[1], node) * self.array(i[4], node)
                ins.append(self.bias(i[6], scale, node))
            if i[7]:
                self.q(self.float_op("Gemm", ins, node), i[7], i[8], y)
            else:
                self.float_op("Gemm", ins, node, out=y)
        elif op in _BINARY:
            a, b = self.dq(i[0], i[1], i[2]), self.dq(i[3], i[4], i[5])
            self.q(self.float_op(_BINARY[op], [a, b], node), i[6], i[7], y)
        elif op in _UNARY:
            x = self.dq(i[0], i[1], i[2])
            self.q(self.float_op(_UNARY[op], [x], node, drop=("channels_last", "opset")), i[3], i[4], y)
        else:  # QLinearConcat(y_scale, y_zp, (x, scale, zp)...)
            ins = list(node.input)
            xs = [self.dq(ins[k], ins[k + 1], ins[k + 2]) for k in range(2, len(ins), 3)]
            self.q(self.float_op("Concat", xs, node), ins[0], ins[1], y)
        return True


def qoperator_to_qdq(proto: onnx.ModelProto, path: str) -> None:
    """Rewrite every QOperator node of ``proto`` (in place) into DQ -> float op -> Q."""
    graph = proto.graph
    rewriter = _Rewriter(graph, path)
    ordered: list[onnx.NodeProto] = []
    for node in graph.node:
        rewriter.nodes = []
        if rewriter.rewrite(node):
            ordered.extend(rewriter.nodes)
        else:
            ordered.append(node)
    del graph.node[:]
    graph.node.extend(ordered)
    if not any(n.domain == MS for n in graph.node):
        kept = [o for o in proto.opset_import if o.domain != MS]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    for opset in proto.opset_import:  # per-axis DequantizeLinear needs opset 13
        if opset.domain in ("", "ai.onnx") and opset.version < 13:
            opset.version = 13
