"""Property: compiling any small graph of supported ops preserves its outputs, and the partition
covers every node of the optimized model exactly once.

Hypothesis draws a graph as a list of steps applied to one NCHW tensor (convolutions of every
kind, BatchNorm with calibrated statistics, activations, per-channel arithmetic, residual
branches, Pad before Conv or a pool, Transpose pairs, no-op ops, extra graph outputs) and a tail
(Flatten + Gemm/MatMul, BatchNorm on features). A failing graph shrinks to a short step list,
printed by Hypothesis; rebuild it with ``build_graph(steps, tail, ...)``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opfuse.models.graph import GraphBuilder

Step = tuple  # ("op", params...) : a flat tuple prints and shrinks well

conv_step = st.tuples(
    st.just("conv"), st.sampled_from([1, 3]), st.sampled_from([1, 2]),
    st.sampled_from(["full", "depthwise", "depthwise_x2", "grouped"]), st.booleans(),
    st.integers(1, 8),
    st.booleans(),
)
ACTS = ["Relu", "Relu6", "ClipRange", "ClipMaxOnly", "Sigmoid", "LeakyRelu", "HardSigmoid",
        "HardSwish", "HardSwishWritten", "HardSwishWrittenMul", "HardSigmoidWritten", "Tanh"]
act_step = st.tuples(st.just("act"), st.sampled_from(ACTS))
# the common shape of a real layer: conv, then optionally BN, then optionally an activation
block_step = st.tuples(
    st.just("block"), conv_step, st.booleans(), st.one_of(st.none(), st.sampled_from(ACTS)),
)
chan_step = st.tuples(
    st.just("chan"), st.sampled_from(["Add", "Sub", "Mul", "Div"]),
    st.sampled_from(["c11", "1c11", "scalar", "full", "row"]), st.booleans(),
)
residual_step = st.tuples(
    st.just("residual"), st.booleans(), st.booleans(), st.sampled_from(["identity", "conv"]),
    st.booleans(),
)
pad_step = st.tuples(
    st.just("pad"), st.sampled_from(["Conv", "MaxPool", "AveragePool"]),
    st.sampled_from(["constant", "reflect", "constant_half"]), st.integers(0, 1),
    st.integers(1, 2),
)
pool_step = st.tuples(
    st.just("pool"), st.sampled_from(["MaxPool", "AveragePool"]), st.sampled_from([2, 3]),
    st.sampled_from([1, 2]), st.integers(0, 1), st.booleans(),
)
transpose_step = st.tuples(
    st.just("transpose"), st.sampled_from(["pair", "swap_hw"]), st.permutations([0, 1, 2, 3]),
)
noop_step = st.tuples(st.just("noop"), st.sampled_from(["Identity", "Dropout", "Reshape"]))
bn_step = st.tuples(st.just("bn"), st.sampled_from([1e-5, 1e-3]))
STEP = st.one_of(block_step, block_step, conv_step, bn_step, act_step, chan_step, residual_step, pad_step,
                 pool_step, transpose_step, noop_step, st.just(("output",)))
TAIL = st.one_of(
    st.just(("none",)),
    st.tuples(st.just("gemm"), st.booleans(), st.booleans(), st.booleans(), st.booleans(),
              st.sampled_from([(1.0, 1.0), (0.5, 2.0)])),
    st.tuples(st.just("matmul"), st.booleans(), st.booleans()),
)


class _Graph:
    """Applies steps to the current tensor; numbered node names keep every name unique."""

    def __init__(self, seed: int, shape: tuple[int, ...]) -> None:
        self.g = GraphBuilder("property", seed)
        self.x = self.g.input("input", shape)
        self.count = 0
        self.extra_outputs: list[str] = []

    def name(self, op: str) -> str:
        self.count += 1
        return f"{op.lower()}_{self.count}"

    def const(self, array: np.ndarray, dtype: type = np.float32) -> str:
        return self.g.init(self.name("const"), array, dtype)

    def bn(self, x: str, eps: float = 1e-5) -> str:
        # var >= 0.01: a channel a Clip made constant would otherwise be scaled by ~100 per BN,
        # and two such folds amplify float32 rounding past any fair tolerance
        return self.g.bn(x, self.name("bn"), eps=eps, min_var=1e-2)

    def op(self, op: str, inputs: list[str], result: np.ndarray, **attrs: object) -> str:
        return self.g.node(op, inputs, self.name(op), result, **attrs)

    @property
    def hw(self) -> tuple[int, int]:
        return self.g.shape(self.x)[2], self.g.shape(self.x)[3]


def _pool_ref(a: np.ndarray, op: str, k: int, s: int, pad: int, include_pad: bool) -> np.ndarray:
    fill = -np.inf if op == "MaxPool" else 0.0
    p = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    oh, ow = (p.shape[2] - k) // s + 1, (p.shape[3] - k) // s + 1

    def taps(arr: np.ndarray) -> np.ndarray:
        return np.stack([arr[:, :, i : i + s * (oh - 1) + 1 : s, j : j + s * (ow - 1) + 1 : s]
                         for i in range(k) for j in range(k)])

    if op == "MaxPool":
        return taps(p).max(0)
    if include_pad or pad == 0:
        return taps(p).mean(0)
    ones = np.pad(np.ones_like(a), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return taps(p).sum(0) / taps(ones).sum(0)


def _act(gr: _Graph, kind: str) -> None:
    g, x = gr.g, gr.x
    a = g.val[x]
    if kind == "Relu6":
        gr.x = g.relu6(x, gr.name("relu6"))
    elif kind == "ClipMaxOnly":  # an omitted optional input: Clip(x, "", max)
        gr.x = gr.op("Clip", [x, "", gr.const(np.array(0.5))], np.minimum(a, 0.5))
    elif kind == "ClipRange":
        lo, hi = gr.const(np.array(-0.5)), gr.const(np.array(0.75))
        gr.x = gr.op("Clip", [x, lo, hi], np.clip(a, -0.5, 0.75))
    elif kind == "LeakyRelu":
        gr.x = gr.op("LeakyRelu", [x], np.where(a > 0, a, 0.1 * a), alpha=0.1)
    elif kind == "HardSigmoid":
        gr.x = gr.op("HardSigmoid", [x], np.clip(a / 6 + 0.5, 0, 1), alpha=1 / 6, beta=0.5)
    elif kind == "HardSwish":
        gr.x = gr.op("HardSwish", [x], a * np.clip(a / 6 + 0.5, 0, 1))
    elif kind == "HardSwishWrittenMul":  # the other spelling: Clip(x + 3, 0, 6) * x * (1/6)
        t = gr.op("Add", [g.shared("three", np.array(3.0)), x], a + 3)
        c = g.relu6(t, gr.name("relu6"))
        c = gr.op("Mul", [c, x], g.val[c] * a)
        gr.x = gr.op("Mul", [c, g.shared("sixth", np.array(1 / 6))], g.val[c] * np.float32(1 / 6))
    elif kind in ("HardSwishWritten", "HardSigmoidWritten"):
        # as exporters write them: x * Clip(x + 3, 0, 6) / 6 and Clip(x + 3, 0, 6) / 6
        t = gr.op("Add", [x, g.shared("three", np.array(3.0))], a + 3)
        c = g.relu6(t, gr.name("relu6"))
        if kind == "HardSwishWritten":
            c = gr.op("Mul", [x, c], a * g.val[c])
        gr.x = gr.op("Div", [c, g.shared("six", np.array(6.0))], g.val[c] / 6)
    else:
        fn = {"Relu": lambda v: np.maximum(v, 0), "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
              "Tanh": np.tanh}[kind]
        gr.x = gr.op(kind, [x], fn(a))


def _chan(gr: _Graph, op: str, layout: str, const_first: bool) -> None:
    c = gr.g.shape(gr.x)[1]
    h, w = gr.hw  # "full" and "row" are not per-channel: they must not fold into a bias
    shape = {"c11": (c, 1, 1), "1c11": (1, c, 1, 1), "scalar": (), "full": (1, c, h, w),
             "row": (1, 1, 1, w)}[layout]
    rng = gr.g.rng
    if op in ("Mul", "Div"):
        k = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        k = rng.normal(0.0, 0.5, shape)
    const = gr.const(k)
    # a constant divided by an activation would divide by zero after a Relu: divide x only
    ins = [const, gr.x] if const_first and op != "Div" else [gr.x, const]
    a, b = (gr.g.val[i] for i in ins)
    ref = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](a, b)
    gr.x = gr.op(op, ins, ref)


def _apply(gr: _Graph, step: Step) -> None:
    g, kind = gr.g, step[0]
    h, w = gr.hw
    if kind == "block":
        _, conv, bn, act = step
        _apply(gr, conv)
        if bn:
            _apply(gr, ("bn",))
        if act is not None:
            _act(gr, act)
    elif kind == "conv":
        _, k, stride, grouping, bias, cout, same = step
        cin = g.shape(gr.x)[1]
        group = 1
        if grouping in ("depthwise", "depthwise_x2"):
            group, cout = cin, cin * (2 if grouping == "depthwise_x2" else 1)
        elif grouping == "grouped" and cin % 2 == 0 and cout % 2 == 0:
            group = 2
        pad = k // 2 if same or min(h, w) < k else 0
        stride = stride if min(h, w) >= 4 else 1
        gr.x = g.conv(gr.x, cout, k, gr.name("conv"), stride=stride, pads=(pad,) * 4, group=group,
                      bias=bias)
    elif kind == "bn":
        gr.x = gr.bn(gr.x, eps=step[1] if len(step) > 1 else 1e-5)
    elif kind == "act":
        _act(gr, step[1])
    elif kind == "chan":
        _chan(gr, *step[1:])
    elif kind == "residual":
        _, with_bn, with_relu, shortcut, relu_after = step
        c = g.shape(gr.x)[1]
        a = g.conv(gr.x, c, 3, gr.name("conv"))
        a = gr.bn(a) if with_bn else a
        a = g.relu(a, gr.name("relu")) if with_relu else a
        b = gr.x if shortcut == "identity" else g.conv(gr.x, c, 1, gr.name("conv"), bias=True)
        gr.x = g.add(a, b, gr.name("add"))
        gr.x = g.relu(gr.x, gr.name("relu")) if relu_after else gr.x
    elif kind == "pad":
        _, consumer, mode, top, left = step
        if mode == "reflect" and min(h, w) <= max(top, left):
            mode = "constant"  # reflect needs a pad smaller than the dim
        pads = np.array([0, 0, top, left, 0, 0, left, top])
        width = ((0, 0), (0, 0), (top, left), (left, top))
        fill = 0.5 if mode == "constant_half" else 0.0  # a non-zero fill must not fold
        if mode == "reflect":
            ref = np.pad(g.val[gr.x], width, mode="reflect")
        else:
            ref = np.pad(g.val[gr.x], width, constant_values=fill)
        ins = [gr.x, gr.const(pads, np.int64)] + ([gr.const(np.array(fill))] if fill else [])
        gr.x = gr.op("Pad", ins, ref, mode="reflect" if mode == "reflect" else "constant")
        if consumer == "Conv":
            k = 3 if min(gr.hw) >= 3 else 1
            gr.x = g.conv(gr.x, g.shape(gr.x)[1], k, gr.name("conv"), pads=(0, 0, 0, 0))
        elif min(gr.hw) >= 2:
            attrs = {"count_include_pad": 1} if consumer == "AveragePool" else {}
            gr.x = gr.op(consumer, [gr.x], _pool_ref(g.val[gr.x], consumer, 2, 1, 0, True),
                         kernel_shape=[2, 2], strides=[1, 1], **attrs)
    elif kind == "pool":
        _, op, k, stride, pad, include = step
        if min(h, w) + 2 * pad < k + 1:
            return
        attrs = {"count_include_pad": int(include)} if op == "AveragePool" else {}
        ref = _pool_ref(g.val[gr.x], op, k, stride, pad, include)
        gr.x = gr.op(op, [gr.x], ref, kernel_shape=[k, k], strides=[stride, stride],
                     pads=[pad] * 4, **attrs)
    elif kind == "transpose":
        _, how, perm = step
        if how == "swap_hw":
            gr.x = g.transpose(gr.x, (0, 1, 3, 2), gr.name("transpose"))
        else:
            gr.x = g.transpose(gr.x, tuple(perm), gr.name("transpose"))
            gr.x = g.transpose(gr.x, tuple(int(i) for i in np.argsort(perm)), gr.name("transpose"))
    elif kind == "noop":
        if step[1] == "Reshape":
            gr.x = g.reshape(gr.x, g.shape(gr.x), gr.name("reshape"))
        else:
            gr.x = gr.op(step[1], [gr.x], g.val[gr.x])
    elif kind == "output" and gr.x != "input" and gr.x not in gr.extra_outputs:
        gr.extra_outputs.append(gr.x)


def _tail(gr: _Graph, tail: Step) -> None:
    g = gr.g
    if tail[0] == "none":
        return
    if tail[0] == "gemm":
        _, pool, trans_b, bn, relu, (alpha, beta) = tail
        x = g.global_avgpool(gr.x, gr.name("gap")) if pool else gr.x
        x = g.flatten(x, gr.name("flatten"))
        cin = g.shape(x)[1]
        wt = gr.const(g.normal((10, cin) if trans_b else (cin, 10), float(np.sqrt(1 / cin))))
        b = gr.const(g.normal((10,), 0.1))
        wv = g.val[wt].T if trans_b else g.val[wt]
        x = gr.op("Gemm", [x, wt, b], alpha * (g.val[x] @ wv) + beta * g.val[b], transB=int(trans_b),
                  alpha=alpha, beta=beta)
        if bn:  # BatchNorm on (N, C) features: statistics drawn, not calibrated (batch of 1)
            gamma, beta = g.uniform((10,), 0.6, 1.4), g.normal((10,), 0.2)
            mean, var = g.normal((10,), 0.5), g.uniform((10,), 0.5, 2.0)
            ins = [x] + [gr.const(v) for v in (gamma, beta, mean, var)]
            ref = gamma * (g.val[x] - mean) / np.sqrt(var + 1e-5) + beta
            x = gr.op("BatchNormalization", ins, ref, epsilon=1e-5)
        gr.x = g.relu(x, gr.name("relu")) if relu else x
    else:  # "matmul": Flatten, MatMul with a constant, Add bias, optional Mul by a constant
        _, with_bias, with_scale = tail
        x = g.flatten(gr.x, gr.name("flatten"))
        cin = g.shape(x)[1]
        wt = gr.const(g.normal((cin, 8), float(np.sqrt(1 / cin))))
        x = g.matmul(x, wt, gr.name("matmul"))
        if with_bias:
            x = g.add(x, gr.const(g.normal((8,), 0.1)), gr.name("add"))
        if with_scale:
            x = g.mul(x, gr.const(g.uniform((8,), 0.5, 1.5)), gr.name("mul"))
        gr.x = x


def build_graph(steps: list[Step], tail: Step, channels: int, hw: tuple[int, int],
                seed: int) -> onnx.ModelProto:
    gr = _Graph(seed, (1, channels, *hw))
    for step in steps:
        _apply(gr, step)
    _tail(gr, tail)
    if gr.x == "input":  # an empty graph: give it one node
        gr.x = gr.op("Relu", [gr.x], np.maximum(gr.g.val[gr.x], 0))
    for name in [*gr.extra_outputs, gr.x]:
        if name not in [o.name for o in gr.g.outputs]:
            gr.g.output(name)
    return gr.g.model("hypothesis-generated graph")


def _run(proto: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _targets() -> list[str]:
    from opfuse.targets import list_targets

    return list_targets() or ["x86-host"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(STEP, min_size=1, max_size=7),
    tail=TAIL,
    channels=st.integers(1, 6),
    hw=st.tuples(st.integers(3, 9), st.integers(3, 9)),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_compile_preserves_outputs(steps: list[Step], tail: Step, channels: int,
                                   hw: tuple[int, int], seed: int, data: st.DataObject) -> None:
    from opfuse.pipeline import compile_model

    target = data.draw(st.sampled_from(_targets()), label="target")
    proto = build_graph(steps, tail, channels, hw, seed)
    onnx.checker.check_model(proto, full_check=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "graph.onnx"
        onnx.save(proto, path)
        result = compile_model(path, target)

    x = np.random.default_rng(seed).standard_normal((1, channels, *hw)).astype(np.float32)
    expected = _run(proto, x)
    original = _run(ir.to_proto(result.original), x)
    optimized_proto = ir.to_proto(result.optimized)
    onnx.checker.check_model(optimized_proto)
    optimized = _run(optimized_proto, x)
    assert len(original) == len(optimized) == len(expected)
    for want, got_orig, got_opt in zip(expected, original, optimized, strict=True):
        tol = 1e-4 * max(1.0, float(np.abs(want).max()))
        assert got_orig.shape == got_opt.shape == want.shape
        assert float(np.abs(got_orig - want).max()) <= tol, "import changed the outputs"
        assert float(np.abs(got_opt - want).max()) <= tol, "canonicalization changed the outputs"

    # every node of the optimized model sits in exactly one kernel, and nothing else does
    members = [n for k in result.partition.kernels for n in k.nodes]
    assert sorted(members) == sorted(node.name for node in result.optimized.graph)
    assert len(result.before.kernels) == len(list(result.original.graph))


@pytest.mark.parametrize("steps", [
    [("conv", 3, 1, "depthwise", False, 4, True), ("bn",), ("act", "Relu6")],
    [("residual", True, True, "identity", True), ("output",), ("bn",)],
    [("pad", "Conv", "constant", 1, 1), ("pad", "MaxPool", "constant", 1, 2)],
    [("pad", "AveragePool", "reflect", 0, 1), ("transpose", "pair", [0, 2, 3, 1])],
])
def test_examples_build_valid_graphs(steps: list[Step]) -> None:
    """The generator itself: its numpy reference agrees with onnxruntime on the graphs it writes."""
    gr = _Graph(0, (1, 4, 7, 6))
    for step in steps:
        _apply(gr, step)
    gr.g.output(gr.x)
    proto = gr.g.model("example")
    onnx.checker.check_model(proto, full_check=True)
    (y,) = _run(proto, gr.g.val["input"].astype(np.float32))
    np.testing.assert_allclose(y, gr.g.val[gr.x], rtol=1e-4, atol=1e-4)
