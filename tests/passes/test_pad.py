"""Pad folded into Conv, AveragePool and MaxPool where legal, refused otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.helpers.passes import canonicalized, fired, make_model, op_counts, rng

SPATIAL = [0, 0, 1, 2, 0, 0, 2, 1]  # N, C untouched; H: 1 before, 2 after; W: 2 before, 1 after


def padded(
    consumer: helper.NodeProto,
    pads=SPATIAL,
    value: float | None = 0.0,
    mode: str = "constant",
    pre: str | None = None,
    inits=None,
):
    inits = dict(inits or {})
    inits["pads"] = np.array(pads, np.int64)
    inputs = ["p_in", "pads"]
    if value is not None:
        inits["pv"] = np.array(value, np.float32)
        inputs.append("pv")
    nodes = []
    if pre:
        nodes.append(helper.make_node(pre, ["x"], ["p_in"]))
    else:
        inputs[0] = "x"
    nodes += [helper.make_node("Pad", inputs, ["p"], mode=mode), consumer]
    return make_model(nodes, {"x": [1, 2, 6, 6]}, {"y": None}, inits)


def conv(**kw) -> tuple[helper.NodeProto, dict[str, np.ndarray]]:
    w = rng().standard_normal((3, 2, 3, 3)).astype(np.float32)
    return helper.make_node("Conv", ["p", "w"], ["y"], **kw), {"w": w}


@pytest.mark.parametrize("own", [None, [1, 1, 1, 1]])
def test_conv(own: list[int] | None) -> None:
    node, inits = conv(**({"pads": own} if own else {}))
    _, after, counts = canonicalized(padded(node, inits=inits))
    assert op_counts(after) == {"Conv": 1}
    assert fired(counts) == {"fuse_pad_into_conv": 1}


def test_conv_auto_pad_then_pad() -> None:
    node, inits = conv(auto_pad="SAME_UPPER")
    _, after, counts = canonicalized(padded(node, inits=inits))
    assert op_counts(after) == {"Conv": 1}
    assert fired(counts) == {"normalize_conv_auto_pad": 1, "fuse_pad_into_conv": 1}


@pytest.mark.parametrize(
    ("pads", "value", "mode"),
    [
        (SPATIAL, 1.0, "constant"),
        ([0, 1, 1, 1, 0, 0, 1, 1], 0.0, "constant"),
        (SPATIAL, None, "reflect"),
    ],
    ids=["nonzero-value", "channel-pad", "reflect"],
)
def test_conv_refused(pads: list[int], value: float | None, mode: str) -> None:
    node, inits = conv()
    if pads[1]:
        inits["w"] = rng().standard_normal((3, 3, 3, 3)).astype(np.float32)
    _, after, _ = canonicalized(padded(node, pads, value, mode, inits=inits))
    assert op_counts(after) == {"Pad": 1, "Conv": 1}


@pytest.mark.parametrize(
    ("attrs", "folds"),
    [
        ({}, True),
        ({"count_include_pad": 0}, True),
        ({"pads": [1, 0, 0, 1], "count_include_pad": 1}, True),
        ({"pads": [1, 0, 0, 1], "count_include_pad": 0}, False),
        ({"ceil_mode": 1, "strides": [2, 2]}, False),
    ],
    ids=["plain", "exclude-no-own-pads", "include-own-pads", "exclude-own-pads", "ceil"],
)
def test_average_pool(attrs: dict, folds: bool) -> None:
    node = helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[3, 3], **attrs)
    _, after, counts = canonicalized(padded(node))
    assert op_counts(after) == ({"AveragePool": 1} if folds else {"Pad": 1, "AveragePool": 1})
    assert counts["fuse_pad_into_avgpool"] == int(folds)


@pytest.mark.parametrize(
    ("value", "pre", "folds"),
    [
        (-np.inf, None, True),
        (0.0, "Relu", True),
        (-1.0, "Sigmoid", True),
        (0.0, None, False),
        (0.5, "Relu", False),
    ],
    ids=["minus-inf", "zero-after-relu", "below-sigmoid", "zero-unbounded", "above-relu-min"],
)
def test_max_pool(value: float, pre: str | None, folds: bool) -> None:
    node = helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3], strides=[2, 2])
    _, after, counts = canonicalized(padded(node, value=value, pre=pre))
    assert ("Pad" not in op_counts(after)) == folds
    assert counts["fuse_pad_into_maxpool"] == int(folds)


def test_max_pool_after_clip() -> None:
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        helper.make_node("Pad", ["c", "pads", "pv"], ["p"]),
        helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3]),
    ]
    inits = {
        "lo": np.array(-0.5, np.float32),
        "hi": np.array(6.0, np.float32),
        "pads": np.array(SPATIAL, np.int64),
        "pv": np.array(-0.5, np.float32),
    }
    _, after, _ = canonicalized(make_model(nodes, {"x": [1, 2, 6, 6]}, {"y": None}, inits))
    assert op_counts(after) == {"Clip": 1, "MaxPool": 1}


def test_pad_as_large_as_the_kernel_is_kept() -> None:
    node = helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[2, 2])
    _, after, _ = canonicalized(padded(node, pads=[0, 0, 2, 0, 0, 0, 0, 0], value=-np.inf))
    assert op_counts(after) == {"Pad": 1, "MaxPool": 1}
