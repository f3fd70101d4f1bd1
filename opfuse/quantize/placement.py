"""Where QuantizeLinear/DequantizeLinear go in the canonicalized float model (docs/quantize.md).

The model has BN folded and its kernels decided for the target; in int8 a kernel's output is the
one tensor it writes, so it is the one tensor quantized (TFLite's rule, and what opfuse's QDQ
import folds back into one int8 node, opfuse/frontends/qdq.py):

* every float activation is quantized once, at its producer's output: a graph input, the output
  of a clamp (Relu/Clip: the kernel's last op), of a pool, an Add, a Softmax...;
* the output of an op read only by a clamp (Conv -> Relu6 inside one kernel) is *not* quantized:
  the clamp's output range is the kernel's, so the ReLU/ReLU6 range is folded into the output
  scale, as TFLite does with a fused activation;
* ops that only move data (opfuse.ops.groups QUANT_PASS: MaxPool, Reshape, Flatten, Transpose...)
  take their input's parameters, so their int8 kernel is exact;
* Softmax and Sigmoid outputs are fixed at scale 1/256, zero point -128, Tanh at 1/128, 0
  (TFLite's int8 conventions), except where that output is a graph output: there nothing int8
  reads it and opfuse's int8 C (rounding ``onnx``) takes any output scale, so the fixed step is
  halved while the range its int8 input allows still fits (``bounded_params``: never clipped,
  never worse than 1/256; finer for a classifier whose logits span little: docs/quantize.md);
* weights of Conv/ConvTranspose/Gemm/MatMul: int8 symmetric, per output channel unless
  ``--per-tensor``; their bias int32 at scale s_x * s_w[c]; any other float constant an op
  reads as data (an Add's constant operand): int8 per tensor on its own range;
* a kept-float kernel (``--keep-float``, its node names in ``keep``): its weights stay float and
  the tensors it writes only for itself (a conv's output before a fused residual Add) are not
  quantized, so it runs as a float island between the DQ of its inputs and the Q of its output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from opfuse.fresh_names import GraphAdditions
from opfuse.ops import groups

QUANTIZABLE = groups.QUANTIZABLE
PASS = groups.QUANT_PASS
CLAMPS = groups.CLAMPS
WEIGHTED = {"Conv": 0, "ConvTranspose": 1, "Gemm": None, "MatMul": -1}  # op -> output-channel axis
FIXED = {"Softmax": (1.0 / 256.0, -128), "Sigmoid": (1.0 / 256.0, -128), "Tanh": (1.0 / 128.0, 0)}
# float inputs that are parameters, not data: the QDQ import quantizes them with the data's
# params (Clip bounds, Pad value) or keeps them float (Resize's roi and scales)
PARAM_INPUTS = {"Clip": (1, 2), "Pad": (2,), "Resize": (1, 2, 3)}
QMIN, QMAX = -128, 127
BIAS_LIMIT = 2**30  # |int32 bias| at most this: room left for the accumulated products


@dataclass
class Placement:
    """What is quantized: activation tensors in graph order, each with how its range is set."""

    tensors: list[str] = field(default_factory=list)
    fixed: dict[str, tuple[float, int]] = field(default_factory=dict)  # Softmax/Sigmoid/Tanh
    # a graph output's Softmax/Sigmoid/Tanh -> (op type, its input, the Softmax axis' size)
    bounded: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    shared: dict[str, str] = field(default_factory=dict)  # pass-through output -> input tensor
    producer: dict[str, str] = field(default_factory=dict)  # tensor -> node name ("" for inputs)
    folded: dict[str, str] = field(default_factory=dict)  # clamp output -> the op it folds into
    float_ops: list[str] = field(default_factory=list)  # op types with no int8 form, left float

    @property
    def calibrated(self) -> list[str]:
        """Tensors whose range calibration decides."""
        return [t for t in self.tensors
                if t not in self.fixed and t not in self.shared and t not in self.bounded]


def _float_values(graph: onnx.GraphProto) -> set[str]:
    """Names of float32 activations: graph inputs and node outputs typed float (or untyped)."""
    typed = {vi.name: vi.type.tensor_type.elem_type
             for vi in [*graph.input, *graph.value_info, *graph.output]}
    inits = {i.name for i in graph.initializer}
    names = {i.name for i in graph.input if i.name not in inits}
    for node in graph.node:
        names.update(o for o in node.output if o)
    return {n for n in names if typed.get(n, TensorProto.FLOAT) == TensorProto.FLOAT}


def place(graph: onnx.GraphProto, keep: frozenset[str] = frozenset()) -> Placement:
    """The activation tensors of ``graph`` to quantize, in graph order (see the module docstring);
    ``keep``: names of the nodes of the kernels left float."""
    floats = _float_values(graph)
    inits = {i.name for i in graph.initializer}
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    plan = Placement()
    for inp in graph.input:
        if inp.name in floats and inp.name not in inits:
            plan.tensors.append(inp.name)
            plan.producer[inp.name] = ""
    for node in graph.node:
        if node.op_type not in QUANTIZABLE and node.op_type not in PASS:
            plan.float_ops.append(node.op_type)
        for out in node.output:
            if not out or out not in floats:
                continue
            users = readers.get(out, [])
            if node.name in keep and out not in outputs and users and all(
                    u.name in keep for u in users):
                continue  # inside a float island
            into_clamp = (node.op_type in QUANTIZABLE and node.op_type not in PASS and users
                          and out not in outputs
                          and all(u.op_type in CLAMPS and u.input[0] == out for u in users))
            if into_clamp:
                for u in users:
                    plan.folded[u.output[0]] = node.name
                continue
            plan.tensors.append(out)
            plan.producer[out] = node.name
            if node.op_type in FIXED and out in outputs and node.input[0] in plan.producer:
                plan.bounded[out] = (node.op_type, node.input[0], _axis_size(graph, node, out))
            elif node.op_type in FIXED:
                plan.fixed[out] = FIXED[node.op_type]
            elif node.op_type in PASS and node.input and node.input[0] in plan.producer:
                plan.shared[out] = node.input[0]
    return plan


def _axis_size(graph: onnx.GraphProto, node: onnx.NodeProto, out: str) -> int:
    """The size of a Softmax's axis from the graph output's shape (0 if unknown)."""
    if node.op_type != "Softmax":
        return 1
    dims = next((list(o.type.tensor_type.shape.dim) for o in graph.output if o.name == out), [])
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
    return dims[axis].dim_value if dims and -len(dims) <= axis < len(dims) else 0


def bounded_params(plan: Placement, name: str, params: dict) -> tuple[float, int]:
    """int8 parameters of a graph output's Softmax/Sigmoid/Tanh: TFLite's fixed ones with the
    step halved while the range its int8 input can produce, [lo, hi], still fits (Sigmoid and
    Tanh map it monotonically; a Softmax over n classes is at most 1 / (1 + (n - 1) e^(lo - hi))).
    Each halving keeps every point of TFLite's grid that covers the output, so no output is
    further from its float value than with 1/256, none is clipped, and logits that span little (an
    unsure classifier) get a finer step."""
    op, src, n = plan.bounded[name]
    scale, zp = FIXED[op]
    if root(plan, src) not in params or (op == "Softmax" and n < 1):
        return scale, zp
    s_in, z_in = params[root(plan, src)]
    lo, hi = (QMIN - z_in) * s_in, (QMAX - z_in) * s_in
    if op == "Softmax":
        out_lo, out_hi = 0.0, 1.0 / (1.0 + (n - 1) * float(np.exp(lo - hi)))
    else:
        f = np.tanh if op == "Tanh" else (lambda v: 1.0 / (1.0 + np.exp(-v)))
        out_lo, out_hi = float(f(lo)), float(f(hi))
    for _ in range(24):
        half = scale / 2
        if not ((QMIN - zp) * half <= out_lo and out_hi <= (QMAX - zp) * half):
            break
        scale = half
    return scale, zp


def root(plan: Placement, name: str) -> str:
    """The calibrated (or fixed) tensor whose parameters ``name`` shares."""
    while name in plan.shared:
        name = plan.shared[name]
    return name


# --- rewriting the graph ---


def symmetric_weight(w: np.ndarray, axis: int | None, floor: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, float32 scales): symmetric, [-127, 127], per ``axis`` (None: per tensor).
    A channel of zeros gets scale 1 (its weights stay 0), never a zero scale. ``floor``: the
    smallest scale per channel its int32 bias allows (``bias_floor``)."""
    if axis is None:
        amax = np.array([np.abs(w).max(initial=0.0)], np.float64)
        shape = (1,) * w.ndim
    else:
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        amax = np.abs(moved).max(axis=1, initial=0.0).astype(np.float64)
        shape = [1] * w.ndim
        shape[axis] = -1
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    if floor is not None:
        scale = np.maximum(scale, floor.max() if axis is None else floor)
    scale = scale.astype(np.float32)
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def bias_floor(bias: np.ndarray, s_x: float) -> np.ndarray:
    """Per channel, the smallest weight scale at which ``bias`` fits +-BIAS_LIMIT at scale
    s_x * s_w (TFLite's quantizer keeps a bias in the middle half of int32 the same way). A
    channel whose weights all but vanish (1e-31 after BN folding) beside a live bias would
    otherwise overflow it; its weight scale is raised instead, as TFLite's converter does, so its
    weights round to 0 and the bias holds."""
    return np.abs(bias.astype(np.float64)) / (float(s_x) * BIAS_LIMIT) * (1 + 1e-6)


def own_range_params(c: np.ndarray) -> tuple[float, int]:
    """Per-tensor asymmetric int8 parameters of a constant operand on its own range."""
    lo, hi = min(float(c.min(initial=0.0)), 0.0), max(float(c.max(initial=0.0)), 0.0)
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    zp = int(np.clip(np.rint(QMIN - lo / scale), QMIN, QMAX))
    return scale, zp


class _Rewriter(GraphAdditions):
    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.inits = {i.name: i for i in graph.initializer}
        super().__init__({*self.inits, *(i.name for i in graph.input),
                          *(n.name for n in graph.node), *(o for n in graph.node for o in n.output)})
        self.head: list[onnx.NodeProto] = []  # DQs of constants, first in the graph

    def dequantized_const(self, base: str, q: np.ndarray, scale: np.ndarray, zp: np.ndarray,
                          axis: int | None) -> str:
        """An int8/int32 initializer and the DequantizeLinear reading it; the float name."""
        q_name = self.const(f"{base}_quantized", q)
        per_axis = axis is not None and scale.size > 1
        s = scale.astype(np.float32) if per_axis else np.float32(scale.reshape(-1)[0])
        z = zp.astype(q.dtype) if per_axis else np.asarray(zp.reshape(-1)[0], q.dtype)
        out = self.fresh(f"{base}_dequantized")
        attrs = {"axis": int(axis)} if per_axis else {}
        self.head.append(helper.make_node(
            "DequantizeLinear", [q_name, self.const(f"{base}_scale", np.asarray(s)),
                                 self.const(f"{base}_zero_point", np.asarray(z))],
            [out], name=self.fresh(f"{base}_dequantize"), **attrs))
        return out


def insert_qdq(proto: onnx.ModelProto, plan: Placement, params: dict[str, tuple[float, int]],
               per_tensor: bool = False, keep: frozenset[str] = frozenset()
               ) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``proto`` with Q/DQ on ``plan``'s tensors (``params``: name -> (scale, zero
    point)) and its weights quantized, except those of the nodes in ``keep``; also float name ->
    the name its dequantized value has."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    rw = _Rewriter(graph)
    outputs = {o.name for o in graph.output}
    dq_of: dict[str, str] = {}
    after: dict[str, list[onnx.NodeProto]] = {}
    for name in plan.tensors:
        scale, zp = params[root(plan, name)]
        s_name = rw.const(f"{name}_scale", np.asarray(np.float32(scale)))
        z_name = rw.const(f"{name}_zero_point", np.asarray(zp, np.int8))
        src, dst = name, rw.fresh(f"{name}_dequantized")
        if name in outputs:  # the graph output keeps its name: the producer writes a new one
            src, dst = rw.fresh(f"{name}_float"), name
            for node in graph.node:
                node.output[:] = [src if o == name else o for o in node.output]
        q_out = rw.fresh(f"{name}_quantized")
        nodes = [helper.make_node("QuantizeLinear", [src, s_name, z_name], [q_out],
                                  name=rw.fresh(f"{name}_quantize")),
                 helper.make_node("DequantizeLinear", [q_out, s_name, z_name], [dst],
                                  name=rw.fresh(f"{name}_dequantize"))]
        after.setdefault(plan.producer[name], []).extend(nodes)
        dq_of[name] = dst
        if name not in outputs:  # (readers of a graph output already read the DQ's output)
            for node in graph.node:
                node.input[:] = [dst if i == name else i for i in node.input]
    _quantize_constants(graph, rw, plan, params, dq_of, per_tensor, keep)
    ordered = list(rw.head) + list(after.get("", ()))
    for node in graph.node:
        ordered.append(node)
        ordered.extend(after.get(node.name, ()))
    del graph.node[:]
    graph.node.extend(ordered)
    used = {i for n in graph.node for i in n.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend([*kept, *rw.new_inits])
    del graph.value_info[:]  # the old float types of renamed values would mislead
    return out, dq_of


def _quantize_constants(graph, rw: _Rewriter, plan: Placement, params, dq_of: dict[str, str],
                        per_tensor: bool, keep: frozenset[str] = frozenset()) -> None:
    """Weights, biases and constant operands of the quantizable ops (not kept float), in place."""
    float_of = {v: k for k, v in dq_of.items()}
    for node in graph.node:
        if node.op_type not in QUANTIZABLE or node.name in keep:
            continue
        skip = set(PARAM_INPUTS.get(node.op_type, ()))
        w_scale = floor = None
        x = root(plan, float_of.get(node.input[0], node.input[0])) if node.input else ""
        s_x = params[x][0] if x in params else 1.0
        bias = rw.inits.get(node.input[2]) if len(node.input) > 2 else None
        if node.op_type in WEIGHTED and bias is not None and bias.data_type == TensorProto.FLOAT:
            floor = bias_floor(numpy_helper.to_array(bias), s_x)
        for i, name in enumerate(node.input):
            init = rw.inits.get(name)
            if i in skip or init is None or init.data_type != TensorProto.FLOAT:
                continue
            array = numpy_helper.to_array(init)
            if node.op_type in WEIGHTED and i == 1 and array.ndim >= 2:
                axis = _weight_axis(node, array)
                fits = floor is not None and floor.size == array.shape[axis]
                q, scale = symmetric_weight(array, None if per_tensor else axis,
                                            floor if fits else None)
                w_scale = scale
                node.input[i] = rw.dequantized_const(name, q, scale, np.zeros(scale.shape, np.int8),
                                                     axis)
            elif node.op_type in WEIGHTED and i == 2 and w_scale is not None and array.ndim == 1:
                bscale = (np.float64(s_x) * w_scale.astype(np.float64)).astype(np.float32)
                bscale = np.broadcast_to(bscale, array.shape).copy() if bscale.size == 1 else bscale
                exact = array.astype(np.float64) / bscale.astype(np.float64)  # no float32 overflow
                q = np.clip(np.rint(exact), -BIAS_LIMIT, BIAS_LIMIT).astype(np.int32)
                node.input[i] = rw.dequantized_const(name, q, bscale, np.zeros(q.shape, np.int32),
                                                     0 if bscale.size > 1 else None)
            else:
                scale, zp = own_range_params(array)
                q = np.clip(np.rint(array / scale) + zp, QMIN, QMAX).astype(np.int8)
                node.input[i] = rw.dequantized_const(name, q, np.array([scale], np.float32),
                                                     np.array([zp], np.int8), None)


def _weight_axis(node: onnx.NodeProto, w: np.ndarray) -> int:
    axis = WEIGHTED[node.op_type]
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return axis % w.ndim
