"""Decomposed RMSNorm (Llama's) becomes one RMSNormalization; near misses stay as they are; the ONNX
written for an opset-17 model (no RMSNormalization there) and for an opset-23 one both match
onnxruntime on the original."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers.passes import (
    canonicalized,
    emitted_matches,
    fired,
    make_model,
    op_counts,
)

D = 16


def _n(op: str, inputs: list[str], out: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [out], **attrs)


def rms_model(square: str = "pow", divide: str = "div", opset: int = 23, axis: int = -1,
              two: float = 2.0, w_shape: tuple[int, ...] = (D,),
              extra_output: str | None = None) -> onnx.ModelProto:
    consts = {
        "two": np.array(two, np.float32),
        "eps": np.array(1e-6, np.float32),
        "one": np.array(1.0, np.float32),
        "w": np.random.default_rng(1).standard_normal(w_shape).astype(np.float32),
    }
    nodes = [_n("Pow", ["x", "two"], "sq") if square == "pow" else _n("Mul", ["x", "x"], "sq")]
    if opset >= 18:
        consts["axes"] = np.array([axis], np.int64)
        nodes.append(_n("ReduceMean", ["sq", "axes"], "ms"))
    else:
        nodes.append(_n("ReduceMean", ["sq"], "ms", axes=[axis]))
    nodes += [_n("Add", ["ms", "eps"], "ve"), _n("Sqrt", ["ve"], "r")]
    if divide == "div":
        nodes.append(_n("Div", ["x", "r"], "nx"))
    elif divide == "reciprocal":
        nodes += [_n("Reciprocal", ["r"], "ir"), _n("Mul", ["x", "ir"], "nx")]
    else:
        nodes += [_n("Div", ["one", "r"], "ir"), _n("Mul", ["ir", "x"], "nx")]
    nodes.append(_n("Mul", ["w", "nx"], "y"))
    outputs = {"y": None} | ({extra_output: None} if extra_output else {})
    return make_model(nodes, {"x": [1, 5, D]}, outputs, consts, opset=opset)


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("divide", ["div", "reciprocal", "one_over"])
def test_forms_become_one_rmsnorm(square: str, divide: str) -> None:
    _, after, counts = canonicalized(rms_model(square, divide))
    assert op_counts(after) == {"RMSNormalization": 1}
    assert fired(counts) == {"fuse_rmsnorm": 1}
    (node,) = list(after.graph)
    assert node.attributes["epsilon"].as_float() == pytest.approx(1e-6)


@pytest.mark.parametrize(
    "change",
    [
        {"axis": 1},  # the mean over another axis
        {"two": 3.0},  # another exponent
        {"w_shape": (5, D)},  # a scale that is not per-channel of the last axis
        {"extra_output": "ms"},  # an intermediate read outside the pattern
    ],
    ids=["axis", "exponent", "scale-shape", "extra-reader"],
)
def test_near_misses_are_left(change: dict) -> None:
    _, after, counts = canonicalized(rms_model(**change))
    assert "RMSNormalization" not in op_counts(after)
    assert not counts["fuse_rmsnorm"]


def _emitted_matches(proto: onnx.ModelProto) -> onnx.ModelProto:
    return emitted_matches(proto, "RMSNormalization")


@pytest.mark.parametrize("opset", [17, 18])
def test_old_opsets_get_the_expression_back(opset: int) -> None:
    out = _emitted_matches(rms_model("mul", "reciprocal", opset=opset))
    assert "RMSNormalization" not in {n.op_type for n in out.graph.node}
    assert out.opset_import[0].version == opset


def test_opset23_keeps_rmsnorm() -> None:
    out = _emitted_matches(rms_model("pow", "div", opset=23))
    assert [n.op_type for n in out.graph.node] == ["RMSNormalization"]
