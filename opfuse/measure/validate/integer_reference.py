"""The reference an int8 C of QDQ ONNX is defined against (rounding ``onnx``, docs/architecture.md
"int8 in the IR"): each ``DQ -> Conv/Gemm/MatMul [-> Relu/Clip] -> Q`` group computed as
onnxruntime's QLinearConv / QLinearMatMul define it, not in float.

onnxruntime's ORT_DISABLE_ALL run of a QDQ model dequantizes x and w to float32, sums their
products in float32 (MLAS' order, FMA where the CPU has it) and quantizes the sum: every float
rounding of the sum can move a value lying close to half a quantization step to the other side.
Measured on vww_96 (opfuse quantize): a 1x1 conv whose exact result is 15.5000038 steps (-112)
comes out of the float sum as 15.499997 (-113); the flip travels to the graph output (2 steps).
QLinearConv's definition, and the int8 C, accumulate in integers (exact) and round once:
``y = saturate(rint(float(acc + bias) * float32(s_x * s_w / s_y)) + z_y)``.

Here each such group is rewritten, for onnxruntime (ORT_DISABLE_ALL) to run, into ops whose every
step is exact or one IEEE rounding, so the result is the same on every CPU:

    x_q -> Cast(float) - z_x -> Conv(w_q - z_w as float) -> Cast(int32) + bias_q
        -> Cast(float) * float32(s_x * s_w / s_y) [-> Relu / Clip(lo/s_y, hi/s_y)]
        -> QuantizeLinear(scale 1, z_y)

The float Conv/Gemm/MatMul adds integers: exact in any order while every partial sum stays below
2^24, which ``exact_bound`` checks per output channel (sum of |w| times the largest |x - z_x|); a
group beyond it, or of a form not recognised, stays as written (``Rewrite.kept`` names it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from opfuse.fresh_names import GraphAdditions
from opfuse.ops import groups

ANCHORS = {"Conv", "Gemm", "MatMul"}
EXACT = float(2**24)  # integers up to this are exact in float32
RANGE = {TensorProto.INT8: (-128, 127), TensorProto.UINT8: (0, 255)}


@dataclass
class Rewrite:
    proto: onnx.ModelProto
    rewritten: list[str] = field(default_factory=list)  # anchor nodes computed in integers
    kept: list[str] = field(default_factory=list)  # anchors left in float32, and why


class _Graph(GraphAdditions):
    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.inits = {i.name: i for i in graph.initializer}
        self.producer = {o: n for n in graph.node for o in n.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for n in graph.node:
            for i in n.input:
                self.readers.setdefault(i, []).append(n)
        super().__init__({*self.inits, *self.producer, *(i.name for i in graph.input),
                          *(n.name for n in graph.node)})

    def array(self, name: str) -> np.ndarray | None:
        init = self.inits.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def dq(self, name: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == "DequantizeLinear" else None


def integer_reference(proto: onnx.ModelProto, exposed: frozenset[str] = frozenset()) -> Rewrite:
    """A copy of the QDQ model ``proto`` with its anchor groups rewritten (module docstring);
    a group whose float output or clamp output is in ``exposed`` (a value a caller reads, e.g.
    a float kernel's output in ``--per-kernel``) stays as written."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    g = _Graph(out.graph)
    done = Rewrite(out)
    replace: dict[int, list[onnx.NodeProto]] = {}
    for node in list(out.graph.node):
        if node.op_type not in ANCHORS:
            continue
        new, why = _group(g, node, exposed)
        if new is None:
            done.kept.append(f"{node.name or node.op_type}: {why}")
            continue
        replace[id(node)] = new
        done.rewritten.append(node.name or node.op_type)
    ordered = []
    for node in out.graph.node:
        ordered.extend(replace.get(id(node), [node]))
    del out.graph.node[:]
    out.graph.node.extend(ordered)
    out.graph.initializer.extend(g.new_inits)
    return done


def _group(g: _Graph, node: onnx.NodeProto, exposed: frozenset[str] = frozenset()
           ) -> tuple[list[onnx.NodeProto] | None, str]:
    """The nodes replacing ``node`` (its clamps and Q are rewired, not removed: their new inputs
    are computed here), or None and why the group stays float."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Gemm" and (attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0
                                   or attrs.get("transA", 0)):
        return None, "Gemm with alpha, beta or transA"
    x_dq, w_dq = g.dq(node.input[0]), g.dq(node.input[1]) if len(node.input) > 1 else None
    if x_dq is None or w_dq is None:
        return None, "its input or weight is not a DequantizeLinear's"
    w_q, s_w = g.array(w_dq.input[0]), g.array(w_dq.input[1])
    s_x, z_x = g.array(x_dq.input[1]), g.array(x_dq.input[2]) if len(x_dq.input) > 2 else None
    if w_q is None or s_w is None or s_x is None or s_x.size != 1:
        return None, "weights or input scale not constant per tensor"
    z_w = g.array(w_dq.input[2]) if len(w_dq.input) > 2 else np.zeros(1, np.int8)
    x_type = _elem_type(g, x_dq)
    if x_type not in RANGE or z_w is None:
        return None, "input not int8/uint8"
    chain, q = _clamps_then_q(g, node)
    if q is None:
        return None, "its output is not read by one QuantizeLinear (through Relu/Clip)"
    if any(v in exposed for v in (node.output[0], *(c.output[0] for c in chain))):
        return None, "its float output is read"
    s_y, z_y = g.array(q.input[1]), g.array(q.input[2]) if len(q.input) > 2 else None
    if s_y is None or s_y.size != 1 or z_y is None:
        return None, "output parameters not constant per tensor"
    axis = _out_axis(node, attrs, w_q)
    channels = w_q.shape[axis]
    w_axis = next((a.i for a in w_dq.attribute if a.name == "axis"), 1)
    if s_w.size > 1 and w_axis % w_q.ndim != axis:
        return None, "weight scales not along the output channels"
    w_int = w_q.astype(np.int64) - _along(z_w.astype(np.int64), w_q.ndim, axis, w_axis)
    z_xi = int(z_x.reshape(-1)[0]) if z_x is not None else 0
    lo, hi = RANGE[x_type]
    x_max = max(abs(lo - z_xi), abs(hi - z_xi))
    reduce_axes = tuple(i for i in range(w_q.ndim) if i != axis)
    if float(np.abs(w_int).sum(axis=reduce_axes).max(initial=0)) * x_max >= EXACT:
        return None, "a partial sum could pass 2^24 (not exact in float32)"
    bias = None
    if node.op_type != "MatMul" and len(node.input) > 2 and node.input[2]:
        b_dq = g.dq(node.input[2])
        bias = None if b_dq is None else g.array(b_dq.input[0])
        if bias is None or bias.dtype != np.int32:
            return None, "bias not an int32 DequantizeLinear's"
    s_w32 = np.broadcast_to(s_w.astype(np.float32).reshape(-1), (channels,))
    mult = (np.float32(s_x.reshape(-1)[0]) * s_w32 / np.float32(s_y.reshape(-1)[0])).astype(
        np.float32)
    shape = [1] * _out_rank(g, node, w_q) if node.op_type == "Conv" else [channels]
    if node.op_type == "Conv":
        shape[1] = channels
    base = node.name or node.op_type
    x_f = g.fresh(f"{base}_x_int")
    nodes = [helper.make_node("Cast", [x_dq.input[0]], [x_f + "_cast"], to=TensorProto.FLOAT),
             helper.make_node("Sub", [x_f + "_cast", g.const(f"{base}_zx", np.float32(z_xi))],
                              [x_f])]
    g.taken.add(x_f + "_cast")
    acc_f = g.fresh(f"{base}_acc_float")
    w_name = g.const(f"{base}_w_int", w_int.astype(np.float32))
    nodes.append(helper.make_node(node.op_type, [x_f, w_name], [acc_f], name=g.fresh(base),
                                  **{k: v for k, v in attrs.items()}))
    acc = g.fresh(f"{base}_acc")
    nodes.append(helper.make_node("Cast", [acc_f], [acc], to=TensorProto.INT32))
    if bias is not None:
        biased = g.fresh(f"{base}_acc_bias")
        nodes.append(helper.make_node("Add", [acc, g.const(f"{base}_bias_q",
                                                           bias.reshape(shape))], [biased]))
        acc = biased
    acc_r = g.fresh(f"{base}_acc_real")
    nodes.append(helper.make_node("Cast", [acc], [acc_r], to=TensorProto.FLOAT))
    v = g.fresh(f"{base}_steps")
    nodes.append(helper.make_node("Mul", [acc_r, g.const(f"{base}_mult", mult.reshape(shape))],
                                  [v]))
    s_y32 = np.float32(s_y.reshape(-1)[0])
    for clamp in chain:  # rewired onto the step domain: the same node, new inputs
        clamp.input[0] = v
        if clamp.op_type == "Clip":
            for i in (1, 2):
                bound = g.array(clamp.input[i]) if len(clamp.input) > i and clamp.input[i] else None
                if bound is not None:
                    clamp.input[i] = g.const(f"{base}_clip{i}", np.float32(bound.reshape(-1)[0])
                                             / s_y32)
        v = clamp.output[0]
    q.input[0] = v
    q.input[1] = g.const(f"{base}_unit_scale", np.float32(1.0))
    return nodes, ""


def _clamps_then_q(g: _Graph, node: onnx.NodeProto):  # noqa: ANN202
    """(the Relu/Clip chain, the QuantizeLinear) reading ``node``'s output alone, or ([], None)."""
    chain: list[onnx.NodeProto] = []
    value = node.output[0]
    while True:
        users = g.readers.get(value, [])
        if len(users) != 1 or any(value == o.name for o in g.graph.output):
            return [], None
        user = users[0]
        if user.op_type == "QuantizeLinear":
            return chain, user
        if user.op_type not in groups.CLAMPS or user.input[0] != value:
            return [], None
        chain.append(user)
        value = user.output[0]


def _elem_type(g: _Graph, dq: onnx.NodeProto) -> int | None:
    src = dq.input[0]
    for vi in [*g.graph.input, *g.graph.value_info]:
        if vi.name == src:
            return vi.type.tensor_type.elem_type
    q = g.producer.get(src)
    if q is not None and q.op_type == "QuantizeLinear" and len(q.input) > 2:
        zp = g.inits.get(q.input[2])
        return None if zp is None else zp.data_type
    zp = g.inits.get(dq.input[2]) if len(dq.input) > 2 else None
    return None if zp is None else zp.data_type


def _out_axis(node: onnx.NodeProto, attrs: dict, w: np.ndarray) -> int:
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        return 0 if attrs.get("transB", 0) else 1
    return w.ndim - 1


def _out_rank(g: _Graph, node: onnx.NodeProto, w: np.ndarray) -> int:
    return w.ndim  # Conv: N, C and the spatial axes, as many as the weight's


def _along(z: np.ndarray, ndim: int, axis: int, w_axis: int) -> np.ndarray:
    """A per-axis zero point shaped to broadcast along the weights' output axis."""
    if z.size == 1:
        return z.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return z.reshape(shape)
