"""GELU written out (erf and tanh forms) becomes one Gelu; near misses stay as they are; the ONNX
written for an opset-17 model (no Gelu there) and for an opset-20 one both match onnxruntime."""

from __future__ import annotations

import math

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

CONSTS = {
    "sqrt2": np.array(math.sqrt(2.0), np.float32),
    "inv_sqrt2": np.array(1 / math.sqrt(2.0), np.float32),
    "one": np.array(1.0, np.float32),
    "half": np.array(0.5, np.float32),
    "three": np.array(3.0, np.float32),
    "cubic": np.array(0.044715, np.float32),
    "k": np.array(math.sqrt(2 / math.pi), np.float32),
}


def _n(op: str, inputs: list[str], out: str) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [out])


def erf_arg(kind: str) -> list[onnx.NodeProto]:
    arg = _n("Div", ["x", "sqrt2"], "d") if kind == "div" else _n("Mul", ["inv_sqrt2", "x"], "d")
    return [arg, _n("Erf", ["d"], "f")]


def tanh_arg(kind: str) -> list[onnx.NodeProto]:
    cube = (
        [_n("Pow", ["x", "three"], "cu")]
        if kind == "pow"
        else [_n("Mul", ["x", "x"], "sq"), _n("Mul", ["sq", "x"], "cu")]
    )
    return [
        *cube,
        _n("Mul", ["cubic", "cu"], "cm"),
        _n("Add", ["x", "cm"], "in"),
        _n("Mul", ["in", "k"], "t"),
        _n("Tanh", ["t"], "f"),
    ]


OUTER = {
    "x*(1+f)*0.5": [_n("Add", ["f", "one"], "a"), _n("Mul", ["x", "a"], "p"),
                    _n("Mul", ["p", "half"], "y")],
    "(x*0.5)*(1+f)": [_n("Add", ["one", "f"], "a"), _n("Mul", ["half", "x"], "p"),
                      _n("Mul", ["p", "a"], "y")],
    "x*((1+f)*0.5)": [_n("Add", ["f", "one"], "a"), _n("Mul", ["a", "half"], "p"),
                      _n("Mul", ["x", "p"], "y")],
}
FORMS = {
    **{f"erf-{a}-{o}": (erf_arg(a), o, "none") for a in ("div", "mul") for o in OUTER},
    **{f"tanh-{a}-{o}": (tanh_arg(a), o, "tanh") for a in ("pow", "mul") for o in OUTER},
}


def gelu_model(form: str, opset: int = 20, consts: dict | None = None,
               extra_output: str | None = None) -> onnx.ModelProto:
    arg, outer, _ = FORMS[form]
    outputs = {"y": None} | ({extra_output: None} if extra_output else {})
    return make_model([*arg, *OUTER[outer]], {"x": [2, 3, 8]}, outputs, consts or CONSTS,
                      opset=opset)


@pytest.mark.parametrize("form", list(FORMS))
def test_forms_become_one_gelu(form: str) -> None:
    _, after, counts = canonicalized(gelu_model(form))
    assert op_counts(after) == {"Gelu": 1}
    assert fired(counts) == {"fuse_gelu": 1}
    (gelu,) = list(after.graph)
    approximate = gelu.attributes.get("approximate")
    assert (approximate.as_string() if approximate else "none") == FORMS[form][2]


@pytest.mark.parametrize(
    ("form", "name", "value"),
    [
        ("erf-div-x*(1+f)*0.5", "sqrt2", 1.5),
        ("erf-mul-x*(1+f)*0.5", "inv_sqrt2", 0.6),
        ("erf-div-(x*0.5)*(1+f)", "half", 0.4),
        ("erf-div-x*((1+f)*0.5)", "one", 2.0),
        ("tanh-pow-x*(1+f)*0.5", "three", 2.0),
        ("tanh-pow-x*(1+f)*0.5", "cubic", 0.05),
        ("tanh-mul-x*(1+f)*0.5", "k", 0.7),
    ],
)
def test_other_constants_are_left(form: str, name: str, value: float) -> None:
    consts = dict(CONSTS) | {name: np.array(value, np.float32)}
    _, after, counts = canonicalized(gelu_model(form, consts=consts))
    assert "Gelu" not in op_counts(after)
    assert not counts["fuse_gelu"]


def test_an_intermediate_read_elsewhere_is_left() -> None:
    # the erf value is also a graph output: replacing the pattern would lose it
    _, after, counts = canonicalized(gelu_model("erf-div-x*(1+f)*0.5", extra_output="f"))
    assert "Gelu" not in op_counts(after)
    assert not counts["fuse_gelu"]


def _emitted_matches(proto: onnx.ModelProto) -> onnx.ModelProto:
    return emitted_matches(proto, "Gelu")


@pytest.mark.parametrize("form", ["erf-div-x*(1+f)*0.5", "tanh-pow-(x*0.5)*(1+f)"])
def test_opset17_is_written_back_as_the_expression(form: str) -> None:
    out = _emitted_matches(gelu_model(form, opset=17))
    ops = {n.op_type for n in out.graph.node}
    assert "Gelu" not in ops and ({"Erf", "Tanh"} & ops)
    assert out.opset_import[0].version == 17


def test_opset20_keeps_gelu() -> None:
    out = _emitted_matches(gelu_model("tanh-mul-x*((1+f)*0.5)", opset=20))
    assert [n.op_type for n in out.graph.node] == ["Gelu"]
