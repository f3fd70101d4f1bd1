"""Constant per-channel Mul/Add/Sub/Div after a linear op folded into its weights and bias."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.helpers.passes import canonicalized, fired, make_model, op_counts, rng


def conv_then(op: str, c: np.ndarray, const_left: bool = False, bias: bool = True, **conv):
    g = rng()
    inits = {"w": g.standard_normal((3, 2, 3, 3)).astype(np.float32), "k": c.astype(np.float32)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = g.standard_normal(3).astype(np.float32)
        inputs.append("b")
    operands = ["k", "c"] if const_left else ["c", "k"]
    nodes = [helper.make_node("Conv", inputs, ["c"], **conv), helper.make_node(op, operands, ["y"])]
    return make_model(nodes, {"x": [1, 2, 5, 5]}, {"y": None}, inits)


PER_CHANNEL = np.array([0.5, -2.0, 3.0]).reshape(3, 1, 1)


@pytest.mark.parametrize("op", ["Mul", "Add", "Sub", "Div"])
@pytest.mark.parametrize(
    "c",
    [PER_CHANNEL, PER_CHANNEL.reshape(1, 3, 1, 1), np.array(1.5), np.array([0.25])],
    ids=["c11", "1c11", "scalar", "one"],
)
@pytest.mark.parametrize("bias", [True, False])
def test_conv(op: str, c: np.ndarray, bias: bool) -> None:
    _, after, counts = canonicalized(conv_then(op, c, bias=bias))
    assert op_counts(after) == {"Conv": 1}
    assert fired(counts) == {"fold_affine_into_linear": 1}


@pytest.mark.parametrize("op", ["Mul", "Add", "Sub"])
def test_constant_on_the_left(op: str) -> None:
    # k - conv(x) needs W negated; k * conv and k + conv are the commuted forms.
    _, after, _ = canonicalized(conv_then(op, PER_CHANNEL, const_left=True))
    assert op_counts(after) == {"Conv": 1}


def test_div_constant_by_conv_is_left() -> None:
    _, after, counts = canonicalized(conv_then("Div", PER_CHANNEL + 5, const_left=True))
    assert op_counts(after) == {"Conv": 1, "Div": 1}
    assert not fired(counts)


@pytest.mark.parametrize(
    "c",
    [np.ones((1, 1, 3, 3)), np.ones((3, 3, 3)), np.ones((1, 1, 1, 1, 1)), np.ones(3)],
    ids=["spatial", "c-h-w", "raises-rank", "last-axis"],
)
def test_not_per_channel_is_left(c: np.ndarray) -> None:
    _, after, counts = canonicalized(conv_then("Mul", c * 1.5, pads=[0, 0, 0, 0], strides=[1, 1]))
    assert op_counts(after) == {"Conv": 1, "Mul": 1}
    assert not fired(counts)


def test_div_by_zero_is_left() -> None:
    _, after, _ = canonicalized(conv_then("Div", np.array([1.0, 0.0, 2.0]).reshape(3, 1, 1)))
    assert op_counts(after) == {"Conv": 1, "Div": 1}


def test_intermediate_used_twice_or_output_is_left() -> None:
    inits = {
        "w": rng().standard_normal((3, 2, 1, 1)).astype(np.float32),
        "k": PER_CHANNEL.astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Mul", ["c", "k"], ["y"]),
    ]
    proto = make_model(nodes, {"x": [1, 2, 4, 4]}, {"y": None, "c": None}, inits)
    _, after, counts = canonicalized(proto)
    assert op_counts(after) == {"Conv": 1, "Mul": 1}
    assert not fired(counts)


def test_chain_of_affine_ops() -> None:
    inits = {
        "w": rng().standard_normal((3, 2, 1, 1)).astype(np.float32),
        "s": PER_CHANNEL.astype(np.float32),
        "t": np.array([1.0, 2.0, 3.0], np.float32).reshape(3, 1, 1),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Sub", ["t", "m"], ["a"]),
        helper.make_node("Div", ["a", "s"], ["y"]),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [1, 2, 4, 4]}, {"y": None}, inits))
    assert op_counts(after) == {"Conv": 1}
    assert fired(counts) == {"fold_affine_into_linear": 3}


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("op", ["Mul", "Add", "Sub", "Div"])
def test_gemm(op: str, trans_b: int) -> None:
    g = rng()
    inits = {
        "w": g.standard_normal((5, 4) if trans_b else (4, 5)).astype(np.float32),
        "c": g.standard_normal((1, 5)).astype(np.float32),
        "k": g.uniform(0.5, 2.0, 5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gemm", ["x", "w", "c"], ["m"], transB=trans_b, alpha=0.5, beta=2.0),
        helper.make_node(op, ["m", "k"], ["y"]),
    ]
    _, after, _ = canonicalized(make_model(nodes, {"x": [3, 4]}, {"y": None}, inits))
    assert op_counts(after) == {"Gemm": 1}


@pytest.mark.parametrize(
    ("x_shape", "op", "expected"),
    [
        ([3, 4], "Mul", {"MatMul": 1}),
        ([2, 3, 4], "Div", {"MatMul": 1}),
        ([3, 4], "Add", {"Gemm": 1}),
        ([3, 4], "Sub", {"Gemm": 1}),
        ([2, 3, 4], "Add", {"MatMul": 1, "Add": 1}),
    ],
)
def test_matmul(x_shape: list[int], op: str, expected: dict[str, int]) -> None:
    g = rng()
    inits = {
        "w": g.standard_normal((4, 5)).astype(np.float32),
        "k": g.uniform(0.5, 2, 5).astype(np.float32),
    }
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node(op, ["m", "k"], ["y"])]
    _, after, _ = canonicalized(make_model(nodes, {"x": x_shape}, {"y": None}, inits))
    assert op_counts(after) == expected


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose(group: int) -> None:
    g = rng()
    inits = {
        "w": g.standard_normal((4, 3, 2, 2)).astype(np.float32),
        "k": g.uniform(0.5, 2, (3 * group, 1, 1)).astype(np.float32),
    }
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w"], ["c"], group=group),
        helper.make_node("Mul", ["c", "k"], ["y"]),
    ]
    _, after, _ = canonicalized(make_model(nodes, {"x": [1, 4, 3, 3]}, {"y": None}, inits))
    assert op_counts(after) == {"ConvTranspose": 1}


def test_shared_weights_survive() -> None:
    inits = {
        "w": rng().standard_normal((3, 2, 1, 1)).astype(np.float32),
        "k": PER_CHANNEL.astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"]),
        helper.make_node("Conv", ["x", "w"], ["c2"]),
        helper.make_node("Mul", ["c1", "k"], ["y1"]),
        helper.make_node("Add", ["c2", "k"], ["y2"]),
    ]
    proto = make_model(nodes, {"x": [1, 2, 4, 4]}, {"y1": None, "y2": None}, inits)
    _, after, _ = canonicalized(proto)
    assert op_counts(after) == {"Conv": 2}
