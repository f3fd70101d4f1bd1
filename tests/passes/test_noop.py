"""Identity, Dropout, no-op Reshape/Transpose/Cast removed; Transpose pairs cancelled or merged."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.helpers.passes import canonicalized, fired, make_model, op_counts


def test_identity_inside_and_at_output() -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [2, 3]}, {"y": None}), raw=True)
    assert op_counts(after) == {"Relu": 1}
    assert [v.name for v in after.graph.outputs] == ["y"]
    assert fired(counts) == {"remove_identity": 2}


def test_identity_of_input_or_of_another_output_is_kept() -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["y1"]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["y2"]),
    ]
    proto = make_model(nodes, {"x": [2, 3]}, {"y1": None, "r": None, "y2": None})
    _, after, _ = canonicalized(proto, raw=True)
    assert op_counts(after) == {"Identity": 2, "Relu": 1}
    assert [v.name for v in after.graph.outputs] == ["y1", "r", "y2"]


@pytest.mark.parametrize("mode", ["absent", "false", "true"])
def test_dropout(mode: str) -> None:
    inputs, inits = ["x"], {}
    if mode != "absent":
        inits = {"ratio": np.array(0.5, np.float32)}
        inputs = ["x", "ratio", "train"]
    nodes = [
        helper.make_node("Dropout", inputs, ["d", "mask"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    proto = make_model(nodes, {"x": [2, 3]}, {"y": None}, inits)
    if mode != "absent":
        proto.graph.initializer.append(
            helper.make_tensor("train", TensorProto.BOOL, [], [mode == "true"])
        )
    if mode == "true":  # training mode is random: only check the structure
        from opfuse.passes import canonicalize
        from tests.helpers.passes import import_model

        model = import_model(proto, raw=True)
        canonicalize(model)
        assert op_counts(model)["Dropout"] == 1
        return
    _, after, counts = canonicalized(proto, raw=True)
    assert op_counts(after) == {"Relu": 1}
    assert fired(counts) == {"remove_dropout": 1}


def test_noop_reshape() -> None:
    inits = {"s": np.array([2, 3], np.int64), "t": np.array([3, 2], np.int64)}
    nodes = [
        helper.make_node("Reshape", ["x", "s"], ["a"]),
        helper.make_node("Reshape", ["a", "t"], ["y"]),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [2, 3]}, {"y": None}, inits), raw=True)
    assert op_counts(after) == {"Reshape": 1}
    assert fired(counts) == {"remove_noop_reshape": 1}


def test_noop_transpose_and_cast() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[0, 1, 2]),
        helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [2, 3, 4]}, {"y": None}), raw=True)
    assert op_counts(after) == {"Relu": 1}
    assert fired(counts) == {"remove_noop_transpose": 1, "remove_noop_cast": 1}


@pytest.mark.parametrize(
    ("p", "q", "left"),
    [
        ([0, 2, 3, 1], [0, 3, 1, 2], 0),
        ([1, 0, 2, 3], [0, 1, 3, 2], 1),
        ([2, 0, 3, 1], [3, 2, 1, 0], 1),
    ],
    ids=["nchw-nhwc-inverse", "merged", "merged-2"],
)
def test_transpose_pairs(p: list[int], q: list[int], left: int) -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=p),
        helper.make_node("Transpose", ["a"], ["b"], perm=q),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [2, 3, 4, 5]}, {"y": None}), raw=True)
    assert op_counts(after).get("Transpose", 0) == left
    assert counts["merge_transposes"] == 1


def test_transpose_pair_with_shared_middle_cancels_the_outer_one() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
        helper.make_node("Add", ["a", "a"], ["z"]),
    ]
    proto = make_model(nodes, {"x": [2, 3]}, {"b": None, "z": None})
    _, after, counts = canonicalized(proto)
    # b = x (an Identity: input -> output); the shared middle moves past the Add
    assert op_counts(after) == {"Identity": 1, "Add": 1, "Transpose": 1}
    assert counts["merge_transposes"] == 1 and counts["push_transpose_elementwise"] == 1
