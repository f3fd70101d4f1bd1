"""IEEE edge values through every float C kernel family, fused and unfused, against onnxruntime.

NaN, +/-Inf, -0.0, denormals and FLT_MAX are scattered through random inputs; the generated C must
give NaN where onnxruntime gives NaN, the same infinities, and close finite values elsewhere.

Max-type windows (MaxPool, GlobalMaxPool, ReduceMax/Min, elementwise Max/Min) follow IEEE
``maximum``: a NaN anywhere in the window gives NaN. onnxruntime's result there depends on where
the NaN sits (its MaxPool keeps a NaN only when it is the window's last element, its ReduceMax
only when it is the first), so for those outputs the reference is onnxruntime's value, made NaN
wherever the window holds a NaN; the windows are found by running onnxruntime on the NaN mask.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from opfuse.backends.c import emit_c
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.c_float import reference
from opfuse.measure.validate.ort import compare
from opfuse.pipeline import DEFAULT_TARGET, compile_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

FLT_MAX = float(np.finfo(np.float32).max)
SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 1e-40, -3e-39, FLT_MAX, -FLT_MAX)
N = helper.make_node


def _f(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _w(name, shape, seed=0, scale=0.3):
    # small weights: one FLT_MAX tap times a weight stays finite, whatever the summation order
    arr = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    return onnx.numpy_helper.from_array(arr, name)


def _c(name, values):
    dtype = np.int64 if isinstance(values[0], int) else np.float32
    return onnx.numpy_helper.from_array(np.array(values, dtype=dtype), name)


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _specials(shape, seed: int, every: int = 7) -> np.ndarray:
    """Random normals with one edge value every ``every`` elements (sparse enough that a conv
    window rarely holds two FLT_MAX taps)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    idx = rng.permutation(flat.size)[: flat.size // every]
    for k, i in enumerate(idx):
        flat[i] = SPECIALS[k % len(SPECIALS)]
    return x


# Elementwise ops: each reads x through an exact 1x1 depthwise conv (weight 1), so fused it runs
# as the conv's epilogue and unfused as a standalone elementwise kernel.
UNARY = {
    "Relu": {}, "LeakyRelu": {"alpha": 0.1}, "Sigmoid": {}, "Tanh": {}, "HardSigmoid": {},
    "HardSwish": {}, "Elu": {}, "Softplus": {}, "Abs": {}, "Neg": {}, "Exp": {}, "Erf": {},
}


def _elementwise() -> onnx.ModelProto:
    c = 4
    nodes, outs, inits = [], [], [_c("one", [1.0] * c)]
    inits[0] = onnx.numpy_helper.from_array(np.ones((c, 1, 1, 1), np.float32), "one")
    inits += [_c("lo", [0.0]), _c("hi", [6.0]), _w("slope", [c, 1, 1], 3)]
    for k, (op, attrs) in enumerate(UNARY.items()):
        nodes += [N("Conv", ["x", "one"], [f"c{k}"], group=c), N(op, [f"c{k}"], [op], **attrs)]
        outs.append(op)
    extra = [
        ("Clip", ["lo", "hi"]), ("PRelu", ["slope"]), ("Add", ["y"]), ("Mul", ["y"]),
        ("Div", ["y"]), ("Max", ["y"]), ("Min", ["y"]), ("Sum", ["y"]),
    ]
    for k, (op, args) in enumerate(extra):
        name = f"e{k}"
        nodes += [N("Conv", ["x", "one"], [name], group=c), N(op, [name, *args], [op])]
        outs.append(op)
    shape = [1, c, 5, 6]
    return _model(nodes, [_f("x", shape), _f("y", shape)], [_f(o, None) for o in outs], inits)


FAMILIES: dict[str, Callable[[], onnx.ModelProto]] = {
    "elementwise": _elementwise,
    "conv_bn_relu": lambda: _model(
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         N("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]), N("Relu", ["n"], ["y"])],
        [_f("x", [1, 3, 9, 10])], [_f("y", None)],
        [_w("w", [8, 3, 3, 3]), _w("b", [8], 1), _w("s", [8], 2), _w("bb", [8], 3),
         _w("m", [8], 4), _c("v", [0.5] * 8)]),
    "conv_silu": lambda: _model(  # one Swish once canonicalized: x / (1 + expf(-x)) in C
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Sigmoid", ["c"], ["s"]),
         N("Mul", ["s", "c"], ["y"])],
        [_f("x", [1, 3, 9, 10])], [_f("y", None)], [_w("w", [8, 3, 3, 3]), _w("b", [8], 1)]),
    "conv_pointwise_clip": lambda: _model(
        [N("Conv", ["x", "w"], ["c"]), N("Clip", ["c", "lo", "hi"], ["y"])],
        [_f("x", [1, 16, 6, 6])], [_f("y", None)],
        [_w("w", [24, 16, 1, 1], scale=0.05), _c("lo", [0.0]), _c("hi", [6.0])]),
    "depthwise_relu6": lambda: _model(
        [N("Conv", ["x", "w", "b"], ["c"], group=6, pads=[1, 1, 1, 1], strides=[2, 1]),
         N("Clip", ["c", "lo", "hi"], ["y"])],
        [_f("x", [1, 6, 9, 12])], [_f("y", None)],
        [_w("w", [6, 1, 3, 3]), _w("b", [6], 1), _c("lo", [0.0]), _c("hi", [6.0])]),
    "gemm_softmax": lambda: _model(
        [N("Gemm", ["x", "w", "b"], ["g"], transB=1), N("Softmax", ["g"], ["y"], axis=-1),
         N("MatMul", ["x", "w2"], ["m"]), N("HardSwish", ["m"], ["z"])],
        [_f("x", [6, 10])], [_f("y", None), _f("z", None)],
        [_w("w", [5, 10], scale=0.05), _w("b", [5], 1), _w("w2", [10, 7], 2, scale=0.05)]),
    "softmax_layernorm": lambda: _model(
        [N("Softmax", ["x"], ["y"], axis=-1),
         N("LayerNormalization", ["x", "g", "b"], ["z"], axis=-1)],
        [_f("x", [12, 5])], [_f("y", None), _f("z", None)], [_w("g", [5]), _w("b", [5], 1)]),
    "avg_pools_reductions": lambda: _model(
        [N("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         N("GlobalAveragePool", ["x"], ["g"]),
         N("ReduceSum", ["x", "ax"], ["s"], keepdims=1),
         N("ReduceMean", ["x", "ax"], ["m"], keepdims=0)],
        [_f("x", [1, 3, 7, 8])], [_f(n, None) for n in "agsm"], [_c("ax", [1, 3])], opset=18),
    "max_pools_reductions": lambda: _model(
        [N("MaxPool", ["x"], ["a"], kernel_shape=[2, 3], pads=[0, 1, 1, 1]),
         N("MaxPool", ["x"], ["b"], kernel_shape=[3, 3], strides=[2, 2]),
         N("GlobalMaxPool", ["x"], ["g"]),
         N("ReduceMax", ["x", "ax"], ["r"], keepdims=1)],
        [_f("x", [1, 3, 7, 8])], [_f(n, None) for n in "abgr"], [_c("ax", [1, 3])], opset=18),
    "conv_relu_maxpool": lambda: _model(  # npu-generic runs the pool in the conv's registers
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"]),
         N("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [_f("x", [1, 3, 8, 10])], [_f("y", None)], [_w("w", [6, 3, 3, 3]), _w("b", [6], 1)]),
    "min_reduction": lambda: _model(
        [N("ReduceMin", ["x", "ax"], ["r"], keepdims=0), N("Neg", ["r"], ["y"])],
        [_f("x", [2, 5, 6])], [_f("y", None)], [_c("ax", [2])], opset=18),
}
# outputs whose window follows IEEE maximum/minimum (see the module docstring)
NAN_WINDOWS = {"max_pools_reductions": 1.0, "min_reduction": -1.0}
TARGETS = {"conv_relu_maxpool": "npu-generic"}
NAN_ELEMENTWISE = ("Max", "Min")


def _reference(family: str, path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    _, ref, _ = reference(path, feeds)
    if family in NAN_WINDOWS:  # onnxruntime on the NaN mask marks the windows holding a NaN
        sign = NAN_WINDOWS[family]
        mask = {k: np.where(np.isnan(v), sign, 0.0).astype(np.float32) for k, v in feeds.items()}
        _, hit, _ = reference(path, mask)
        ref = {k: np.where(hit[k] != 0, np.nan, v) for k, v in ref.items()}
    if family == "conv_relu_maxpool":  # the pool's windows over the conv output holding a NaN
        proto = onnx.load(path)
        proto.graph.output.append(onnx.ValueInfoProto(name="r"))
        onnx.save(proto, path.with_name("with_r.onnx"))
        _, inner, _ = reference(path.with_name("with_r.onnx"), feeds)
        hit = np.isnan(inner["r"]).reshape(1, 6, 4, 2, 5, 2).any(axis=(3, 5))
        ref["y"] = np.where(hit, np.nan, ref["y"])
    if family == "elementwise":
        either = np.isnan(feeds["x"]) | np.isnan(feeds["y"])
        for op in NAN_ELEMENTWISE:
            ref[op] = np.where(either, np.nan, ref[op])
    return ref


def _assert_same(name: str, ref: np.ndarray, got: np.ndarray) -> None:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64).reshape(ref.shape)
    nan_ref, nan_got = np.isnan(ref), np.isnan(got)
    assert (nan_ref == nan_got).all(), (
        f"{name}: NaN differs at {np.argwhere(nan_ref != nan_got)[:5].tolist()}")
    inf_ref = np.isinf(ref)
    assert (inf_ref == np.isinf(got)).all() and (ref[inf_ref] == got[inf_ref]).all(), (
        f"{name}: infinities differ at {np.argwhere(inf_ref != np.isinf(got))[:5].tolist()}")
    fin = np.isfinite(ref)
    close = np.isclose(got[fin], ref[fin], rtol=1e-4, atol=1e-5)
    assert close.all(), f"{name}: {ref[fin][~close][:5]} vs {got[fin][~close][:5]}"
    # validate's own comparison treats NaN == NaN and passes the same pair
    assert compare(name, ref, got, 1e-4, 1e-5).max_abs_err < float("inf")


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_edge_values_match_onnxruntime(family: str, fuse: bool, tmp_path: Path) -> None:
    model = FAMILIES[family]()
    path = tmp_path / f"{family}.onnx"
    onnx.save(model, path)
    result = compile_model(path, TARGETS.get(family, DEFAULT_TARGET))
    feeds = {
        v.name: _specials([d.dim_value for d in v.type.tensor_type.shape.dim], seed=k)
        for k, v in enumerate(model.graph.input)
    }
    ref = _reference(family, path, feeds)
    assert any(np.isnan(r).any() for r in ref.values())  # the edge values reach the outputs
    if family in TARGETS and fuse:  # the pool really is fused into the conv
        assert any(k.ops[0] == "Conv" and "MaxPool" in k.ops for k in result.partition.kernels)
    folder = tmp_path / "c"
    emit_c(result, folder, fuse=fuse)
    build_shared(folder)
    got = CModel(folder).run(feeds)
    for name, r in ref.items():
        _assert_same(name, r, got[name])


def test_compare_nan_pairs() -> None:
    a = np.array([np.nan, np.inf, 1.0], np.float32)
    assert compare("y", a, a.copy(), 1e-4, 1e-4).ok
    assert not compare("y", a, np.array([0.0, np.inf, 1.0], np.float32), 1e-4, 1e-4).ok
    assert not compare("y", np.array([0.0, 1.0], np.float32),
                       np.array([np.nan, 1.0], np.float32), 1e-4, 1e-4).ok
    assert not compare("y", a, np.array([np.nan, -np.inf, 1.0], np.float32), 1e-4, 1e-4).ok


def test_no_fast_math_in_build_flags() -> None:
    from opfuse.backends.c import flags

    text = " ".join((*flags.BASE, *flags.WARN))
    assert "fast-math" not in text and "-Ofast" not in text


def test_validate_ds_cnn_with_nan_inputs(tmp_path: Path) -> None:
    """``opfuse validate ds_cnn --backend c --inputs nan.npz``: NaN where onnxruntime has NaN."""
    from click.testing import CliRunner

    from opfuse.cli import cli

    x = np.random.default_rng(5).standard_normal([1, 1, 49, 10]).astype(np.float32)
    x[0, 0, 20, 4] = np.nan  # one sensor glitch: the old ReLU turned it into finite outputs
    np.savez(tmp_path / "nan.npz", input=x)
    _, ref, _ = reference("ds_cnn", {"input": x})
    assert np.isnan(ref["fc"]).all()
    res = CliRunner().invoke(cli, ["validate", "ds_cnn", "--backend", "c",
                                   "--inputs", str(tmp_path / "nan.npz")])
    assert res.exit_code == 0, res.output
    assert "result: match" in res.output
