"""A BatchNorm no linear op absorbed becomes a per-channel Mul + Add."""

from __future__ import annotations

import pytest
from onnx import helper

from tests.helpers.passes import bn, bn_params, canonicalized, fired, make_model, op_counts


@pytest.mark.parametrize("shape", [[1, 3, 4, 4], [2, 3], [1, 3, 5], [1, 3, 2, 2, 2]])
def test_after_relu(shape: list[int]) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), bn("r", "y")]
    _, after, counts = canonicalized(make_model(nodes, {"x": shape}, {"y": None}, bn_params(3)))
    assert op_counts(after) == {"Relu": 1, "Mul": 1, "Add": 1}
    assert fired(counts) == {"batchnorm_to_mul_add": 1}


def test_on_a_graph_input_and_output() -> None:
    _, after, _ = canonicalized(
        make_model([bn("x", "y")], {"x": [1, 3, 4, 4]}, {"y": None}, bn_params(3))
    )
    assert op_counts(after) == {"Mul": 1, "Add": 1}
    assert [v.name for v in after.graph.outputs] == ["y"]


def test_non_constant_parameters_keep_bn() -> None:
    params = bn_params(3)
    del params["bn_g"]
    proto = make_model([bn("x", "y")], {"x": [1, 3, 4, 4], "bn_g": [3]}, {"y": None}, params)
    _, after, counts = canonicalized(proto)
    assert op_counts(after) == {"BatchNormalization": 1}
    assert not fired(counts)
