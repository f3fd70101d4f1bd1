"""hard-sigmoid / hard-swish written out elementwise become HardSigmoid / HardSwish."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.helpers.passes import canonicalized, fired, make_model, op_counts, rng

CONSTS = {
    "three": np.array(3.0, np.float32),
    "zero": np.array(0.0, np.float32),
    "six": np.array(6.0, np.float32),
    "sixth": np.array(1 / 6, np.float32),
}


def relu6_of_x_plus_3(x: str = "x") -> list[helper.NodeProto]:
    return [
        helper.make_node("Add", ["three", x], ["a"]),
        helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
    ]


FORMS = {
    "sigmoid-div": ([helper.make_node("Div", ["c", "six"], ["y"])], "HardSigmoid"),
    "sigmoid-mul": ([helper.make_node("Mul", ["sixth", "c"], ["y"])], "HardSigmoid"),
    "swish-mul-div": (
        [helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])],
        "HardSwish",
    ),
    "swish-mul-mul": (
        [
            helper.make_node("Mul", ["c", "x"], ["m"]),
            helper.make_node("Mul", ["m", "sixth"], ["y"]),
        ],
        "HardSwish",
    ),
    "swish-x-times-sigmoid": (
        [
            helper.make_node("Mul", ["c", "sixth"], ["h"]),
            helper.make_node("Mul", ["x", "h"], ["y"]),
        ],
        "HardSwish",
    ),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_forms(form: str) -> None:
    tail, op = FORMS[form]
    proto = make_model(relu6_of_x_plus_3() + tail, {"x": [2, 3, 4]}, {"y": None}, CONSTS)
    _, after, counts = canonicalized(proto)
    assert op_counts(after) == {op: 1}
    expected = {"fuse_hardswish" if op == "HardSwish" else "fuse_hardsigmoid": 1}
    if form == "swish-x-times-sigmoid":  # HardSigmoid first, then x * HardSigmoid(x)
        expected["fuse_hardsigmoid"] = 1
    assert fired(counts) == expected


def test_after_conv_is_not_absorbed_into_bias() -> None:
    # The +3 of a hard-sigmoid right after a Conv must not be folded into the Conv bias first.
    inits = CONSTS | {"w": rng().standard_normal((3, 2, 1, 1)).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["cv"]),
        *relu6_of_x_plus_3("cv"),
        *FORMS["sigmoid-div"][0],
    ]
    _, after, _ = canonicalized(make_model(nodes, {"x": [1, 2, 4, 4]}, {"y": None}, inits))
    assert op_counts(after) == {"Conv": 1, "HardSigmoid": 1}


@pytest.mark.parametrize("bad", ["three", "six"])
def test_other_constants_are_left(bad: str) -> None:
    consts = dict(CONSTS)
    consts[bad] = np.array(4.0, np.float32)
    tail, _ = FORMS["swish-mul-div"]
    proto = make_model(relu6_of_x_plus_3() + tail, {"x": [2, 3, 4]}, {"y": None}, consts)
    _, after, counts = canonicalized(proto)
    assert "HardSwish" not in op_counts(after)
    assert not counts["fuse_hardswish"] and not counts["fuse_hardsigmoid"]
