"""BatchNorm folded into Conv / ConvTranspose / Gemm / MatMul, and kept where it must stay."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.helpers.passes import bn, bn_params, canonicalized, fired, make_model, op_counts, rng


@pytest.mark.parametrize(
    ("cin", "cout", "group", "bias"),
    [(4, 6, 1, True), (4, 6, 1, False), (4, 6, 2, True), (4, 4, 4, False), (4, 8, 4, True)],
    ids=["plain", "no-bias", "grouped", "depthwise", "depthwise-multiplier"],
)
def test_conv(cin: int, cout: int, group: int, bias: bool) -> None:
    g = rng()
    inits = {
        "w": g.standard_normal((cout, cin // group, 3, 3)).astype(np.float32),
        **bn_params(cout),
    }
    inputs = ["x", "w"]
    if bias:
        inits["b"] = g.standard_normal(cout).astype(np.float32)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], group=group, pads=[1, 1, 1, 1]), bn("c", "y")]
    _, after, counts = canonicalized(make_model(nodes, {"x": [1, cin, 5, 5]}, {"y": None}, inits))
    assert op_counts(after) == {"Conv": 1}
    assert fired(counts) == {"fuse_bn_into_conv": 1}


@pytest.mark.parametrize(("group", "bias"), [(1, True), (1, False), (2, True), (4, False)])
def test_conv_transpose(group: int, bias: bool) -> None:
    cin, cout_g = 4, 3
    g = rng()
    inits = {
        "w": g.standard_normal((cin, cout_g, 2, 2)).astype(np.float32),
        **bn_params(cout_g * group),
    }
    inputs = ["x", "w"]
    if bias:
        inits["b"] = g.standard_normal(cout_g * group).astype(np.float32)
        inputs.append("b")
    nodes = [
        helper.make_node("ConvTranspose", inputs, ["c"], group=group, strides=[2, 2]),
        bn("c", "y"),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [1, cin, 3, 3]}, {"y": None}, inits))
    assert op_counts(after) == {"ConvTranspose": 1}
    assert fired(counts) == {"fuse_bn_into_conv_transpose": 1}


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("bias_shape", [None, (5,), (1, 5), (3, 5), ()])
def test_gemm(trans_a: int, trans_b: int, bias_shape: tuple[int, ...] | None) -> None:
    g = rng()
    inits = {
        "w": g.standard_normal((5, 4) if trans_b else (4, 5)).astype(np.float32),
        **bn_params(5),
    }
    inputs = ["x", "w"]
    if bias_shape is not None:
        inits["c"] = np.asarray(g.standard_normal(bias_shape), dtype=np.float32)
        inputs.append("c")
    gemm = helper.make_node(
        "Gemm", inputs, ["m"], transA=trans_a, transB=trans_b, alpha=0.7, beta=1.3
    )
    x_shape = [4, 3] if trans_a else [3, 4]
    _, after, counts = canonicalized(
        make_model([gemm, bn("m", "y")], {"x": x_shape}, {"y": None}, inits)
    )
    assert op_counts(after) == {"Gemm": 1}
    assert fired(counts) == {"fuse_bn_into_gemm": 1}


def test_matmul_2d_becomes_gemm() -> None:
    inits = {"w": rng().standard_normal((4, 5)).astype(np.float32), **bn_params(5)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), bn("m", "y")]
    _, after, counts = canonicalized(make_model(nodes, {"x": [3, 4]}, {"y": None}, inits))
    assert op_counts(after) == {"Gemm": 1}
    assert fired(counts) == {"fuse_bn_into_matmul": 1}


def test_matmul_3d_cannot_absorb() -> None:
    # BN's channel axis 1 of a (2, 3, 5) MatMul output is not W's column axis.
    inits = {"w": rng().standard_normal((4, 5)).astype(np.float32), **bn_params(3)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), bn("m", "y")]
    _, after, counts = canonicalized(make_model(nodes, {"x": [2, 3, 4]}, {"y": None}, inits))
    assert op_counts(after) == {"MatMul": 1, "Mul": 1, "Add": 1}
    assert fired(counts) == {"batchnorm_to_mul_add": 1}


def test_non_constant_weights_keep_bn() -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), bn("c", "y")]
    proto = make_model(nodes, {"x": [1, 2, 4, 4], "w": [3, 2, 1, 1]}, {"y": None}, bn_params(3))
    _, after, counts = canonicalized(proto)
    assert op_counts(after) == {"Conv": 1, "BatchNormalization": 1}
    assert not fired(counts)


def test_shared_weights_folded_separately() -> None:
    # Both Convs read W; each BN must scale its own copy, and W itself must survive.
    inits = {"w": rng().standard_normal((3, 2, 1, 1)).astype(np.float32)}
    inits |= bn_params(3, "p", 1) | bn_params(3, "q", 2)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"]),
        helper.make_node("Conv", ["x", "w"], ["c2"]),
        bn("c1", "y1", "p"),
        bn("c2", "y2", "q"),
    ]
    proto = make_model(nodes, {"x": [1, 2, 4, 4]}, {"y1": None, "y2": None}, inits)
    _, after, _ = canonicalized(proto)
    assert op_counts(after) == {"Conv": 2}


def test_conv_output_used_twice() -> None:
    inits = {"w": rng().standard_normal((3, 2, 1, 1)).astype(np.float32), **bn_params(3)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        bn("c", "y"),
        helper.make_node("Relu", ["c"], ["z"]),
    ]
    proto = make_model(nodes, {"x": [1, 2, 4, 4]}, {"y": None, "z": None}, inits)
    _, after, counts = canonicalized(proto)
    assert op_counts(after) == {"Conv": 1, "Mul": 1, "Add": 1, "Relu": 1}
    assert fired(counts) == {"batchnorm_to_mul_add": 1}


def test_bn_graph_output_name_kept() -> None:
    inits = {"w": rng().standard_normal((3, 2, 1, 1)).astype(np.float32), **bn_params(3)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), bn("c", "out")]
    _, after, _ = canonicalized(make_model(nodes, {"x": [1, 2, 4, 4]}, {"out": None}, inits))
    assert [v.name for v in after.graph.outputs] == ["out"]
