"""A small ONNX graph writer for the built-in models that also runs what it writes, in numpy.

Every helper appends one node (or a short standard pattern) and evaluates it eagerly in float64 on
a seeded calibration input. That gives two things a builder needs: the shape of every value (so a
builder never does shape arithmetic by hand), and the data statistics a training framework leaves
in BatchNormalization's running mean and variance. Those statistics are what keeps activations
O(1) through 50 layers of random weights, so numerical comparisons of rewritten models mean
something. They are rounded to 12 significant bits (computed in float64), so a model's bytes do not
depend on the BLAS's summation order.

Weights are He-initialised (std sqrt(2 / fan_in)) for convolutions followed by a rectifier, and
LeCun-initialised (std sqrt(1 / fan_in)) for linear layers, all drawn from one seeded generator.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # onnxruntime reads IR 8 everywhere; opset 17 needs no newer
BN_EPS = 1e-5


def round_bits(a: np.ndarray, bits: int = 12) -> np.ndarray:
    """``a`` rounded to ``bits`` significant bits (deterministic regardless of summation order)."""
    mant, exp = np.frexp(np.asarray(a, dtype=np.float64))
    return np.ldexp(np.round(mant * (1 << bits)) / (1 << bits), exp)


def conv_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: tuple[int, int],
    pads: tuple[int, int, int, int], group: int,
) -> np.ndarray:
    """NCHW convolution (ONNX Conv semantics; pads = top, left, bottom, right), batch 1."""
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    _, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    sh, sw = stride
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1

    def tap(i: int, j: int) -> np.ndarray:
        return x[0, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]

    if group == c == m and cg == 1:  # depthwise: a weighted sum of shifted copies
        out = sum(tap(i, j) * w[:, 0, i, j, None, None] for i in range(kh) for j in range(kw))
    else:
        cols = np.stack([tap(i, j) for i in range(kh) for j in range(kw)], axis=1)
        cols = cols.reshape(group, cg * kh * kw, oh * ow)  # (ci, tap) order matches w's layout
        wg = w.reshape(group, m // group, cg * kh * kw)
        out = np.matmul(wg, cols).reshape(m, oh, ow)
    out = np.asarray(out)[None]
    return out if b is None else out + b[None, :, None, None]


def _erf(a: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(a)


class GraphBuilder:
    """Write an ONNX graph node by node; ``val[name]`` holds each value computed on the calibration input."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)  # weights
        self._calib = np.random.default_rng(seed + 1_000_003)  # calibration input
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.val: dict[str, np.ndarray] = {}
        self._shared: dict[str, str] = {}

    # -- graph plumbing ---------------------------------------------------------------------

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.val[name].shape)

    def input(self, name: str, shape: tuple[int, ...]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        self.val[name] = self._calib.standard_normal(shape)
        return name

    def output(self, name: str) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, self.shape(name)))
        return name

    def init(self, name: str, array: np.ndarray, dtype: type = np.float32) -> str:
        arr = np.asarray(array, dtype=dtype)
        self.inits.append(numpy_helper.from_array(arr, name))
        self.val[name] = arr.astype(np.float64) if dtype == np.float32 else arr
        return name

    def shared(self, name: str, array: np.ndarray, dtype: type = np.float32) -> str:
        """An initializer used by many nodes (Clip bounds, Reshape shapes), written once."""
        if name not in self._shared:
            self._shared[name] = self.init(name, array, dtype)
        return self._shared[name]

    def node(self, op: str, inputs: list[str], name: str, result: np.ndarray, **attrs: object) -> str:
        """Append node ``name`` (its output value has the same name) whose value is ``result``."""
        assert name not in self.val, f"duplicate name {name}"
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        self.val[name] = np.asarray(result, dtype=np.float64)
        return name

    def model(self, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        proto = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="opfuse.models",
            producer_version="1",
            doc_string=doc,
        )
        proto.ir_version = IR_VERSION
        return proto

    # -- weights ----------------------------------------------------------------------------

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
        return self.rng.uniform(lo, hi, shape).astype(np.float32)

    # -- layers -----------------------------------------------------------------------------

    def conv(
        self, x: str, cout: int, k: int | tuple[int, int], name: str, *, stride: int = 1,
        pads: tuple[int, int, int, int] | None = None, group: int = 1, bias: bool = False,
        gain: float = 2.0,
    ) -> str:
        kh, kw = (k, k) if isinstance(k, int) else k
        cin = self.shape(x)[1]
        pads = pads if pads is not None else (kh // 2, kw // 2, kh // 2, kw // 2)
        fan_in = cin // group * kh * kw
        w = self.normal((cout, cin // group, kh, kw), math.sqrt(gain / fan_in))
        inputs = [x, self.init(f"{name}.weight", w)]
        b = None
        if bias:
            b = self.normal((cout,), 0.1)
            inputs.append(self.init(f"{name}.bias", b))
        out = conv_ref(self.val[x], self.val[inputs[1]], None if b is None else self.val[inputs[2]],
                       (stride, stride), pads, group)
        return self.node("Conv", inputs, name, out, kernel_shape=[kh, kw], strides=[stride, stride],
                         pads=list(pads), group=group, dilations=[1, 1])

    def bn(self, x: str, name: str, eps: float = BN_EPS, min_var: float = 1e-4) -> str:
        """BatchNormalization in inference mode; running stats are the data's, gamma/beta learned-looking.

        ``min_var`` bounds 1/sqrt(var): a near-constant channel would otherwise get a scale in the
        hundreds, and float32 cancellation after folding would dominate any comparison."""
        a = self.val[x]
        c = a.shape[1]
        mean = round_bits(a.mean(axis=(0, 2, 3)))
        var = round_bits(np.maximum(a.var(axis=(0, 2, 3)), min_var))
        gamma = self.uniform((c,), 0.6, 1.4)
        beta = self.normal((c,), 0.2)
        ins = [x, self.init(f"{name}.weight", gamma), self.init(f"{name}.bias", beta),
               self.init(f"{name}.running_mean", mean), self.init(f"{name}.running_var", var)]
        g, bt, m, v = (self.val[i][None, :, None, None] for i in ins[1:])
        out = g * (a - m) / np.sqrt(v + eps) + bt
        return self.node("BatchNormalization", ins, name, out, epsilon=eps)

    def relu(self, x: str, name: str) -> str:
        return self.node("Relu", [x], name, np.maximum(self.val[x], 0.0))

    def relu6(self, x: str, name: str) -> str:
        lo = self.shared("relu6.min", np.array(0.0))
        hi = self.shared("relu6.max", np.array(6.0))
        return self.node("Clip", [x, lo, hi], name, np.clip(self.val[x], 0.0, 6.0))

    def add(self, a: str, b: str, name: str) -> str:
        return self.node("Add", [a, b], name, self.val[a] + self.val[b])

    def mul(self, a: str, b: str, name: str) -> str:
        return self.node("Mul", [a, b], name, self.val[a] * self.val[b])

    def div(self, a: str, b: str, name: str) -> str:
        return self.node("Div", [a, b], name, self.val[a] / self.val[b])

    def maxpool(self, x: str, k: int, stride: int, pad: int, name: str) -> str:
        a = np.pad(self.val[x], ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
        oh = (a.shape[2] - k) // stride + 1
        ow = (a.shape[3] - k) // stride + 1
        taps = [a[:, :, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride]
                for i in range(k) for j in range(k)]
        return self.node("MaxPool", [x], name, np.max(taps, axis=0), kernel_shape=[k, k],
                         strides=[stride, stride], pads=[pad] * 4)

    def global_avgpool(self, x: str, name: str) -> str:
        return self.node("GlobalAveragePool", [x], name, self.val[x].mean(axis=(2, 3), keepdims=True))

    def avgpool_all(self, x: str, name: str) -> str:
        """AveragePool whose window is the whole feature map (as Keras' AveragePooling2D exports)."""
        h, w = self.shape(x)[2:]
        return self.node("AveragePool", [x], name, self.val[x].mean(axis=(2, 3), keepdims=True),
                         kernel_shape=[h, w], strides=[1, 1])

    def flatten(self, x: str, name: str) -> str:
        return self.node("Flatten", [x], name, self.val[x].reshape(1, -1), axis=1)

    def reshape(self, x: str, shape: tuple[int, ...], name: str) -> str:
        key = "shape." + "x".join(str(d) for d in shape).replace("-", "m")
        s = self.shared(key, np.array(shape), np.int64)
        return self.node("Reshape", [x, s], name, self.val[x].reshape(shape))

    def transpose(self, x: str, perm: tuple[int, ...], name: str) -> str:
        return self.node("Transpose", [x], name, self.val[x].transpose(perm), perm=list(perm))

    def gemm(self, x: str, cout: int, name: str) -> str:
        """A Linear layer as PyTorch exports it: Gemm with transB=1 and weight (out, in)."""
        cin = self.shape(x)[1]
        w = self.init(f"{name}.weight", self.normal((cout, cin), math.sqrt(1.0 / cin)))
        b = self.init(f"{name}.bias", self.normal((cout,), 0.05))
        out = self.val[x] @ self.val[w].T + self.val[b]
        return self.node("Gemm", [x, w, b], name, out, transB=1)

    def linear(self, x: str, cout: int, name: str) -> str:
        """A Linear on a (batch, seq, dim) tensor: MatMul with a constant weight, then Add bias."""
        cin = self.shape(x)[-1]
        w = self.init(f"{name}.weight", self.normal((cin, cout), math.sqrt(1.0 / cin)))
        b = self.init(f"{name}.bias", self.normal((cout,), 0.05))
        mm = self.node("MatMul", [x, w], f"{name}.matmul", self.val[x] @ self.val[w])
        return self.add(mm, b, f"{name}.add")

    def matmul(self, a: str, b: str, name: str) -> str:
        return self.node("MatMul", [a, b], name, self.val[a] @ self.val[b])

    def layernorm(self, x: str, name: str, eps: float = 1e-5) -> str:
        d = self.shape(x)[-1]
        g = self.init(f"{name}.weight", self.uniform((d,), 0.7, 1.3))
        b = self.init(f"{name}.bias", self.normal((d,), 0.1))
        a = self.val[x]
        norm = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + eps)
        return self.node("LayerNormalization", [x, g, b], name, norm * self.val[g] + self.val[b],
                         axis=-1, epsilon=eps)

    def softmax(self, x: str, name: str) -> str:
        a = self.val[x]
        e = np.exp(a - a.max(-1, keepdims=True))
        return self.node("Softmax", [x], name, e / e.sum(-1, keepdims=True), axis=-1)

    def gelu_erf(self, x: str, name: str) -> str:
        """GELU written out as exporters do at opset < 20: 0.5 * x * (1 + erf(x / sqrt(2)))."""
        d = self.div(x, self.shared("gelu.sqrt2", np.array(math.sqrt(2.0))), f"{name}.div")
        e = self.node("Erf", [d], f"{name}.erf", _erf(self.val[d]))
        p = self.add(e, self.shared("gelu.one", np.array(1.0)), f"{name}.add")
        m = self.mul(x, p, f"{name}.mul")
        return self.mul(m, self.shared("gelu.half", np.array(0.5)), f"{name}.mul_half")
