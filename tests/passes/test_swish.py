"""SiLU / Swish written as x * Sigmoid(x) (or x * Sigmoid(alpha x)) becomes one Swish; near misses
stay as they are; the ONNX written for an opset-17 model (no Swish there) and for an opset-24 one
both match onnxruntime on the original."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from opfuse.passes import canonicalize
from tests.helpers.passes import (
    canonicalized,
    emitted_matches,
    fired,
    import_model,
    make_model,
    op_counts,
)
from tests.helpers.qdq_builder import QDQGraph

SHAPE = [2, 3, 8]


def _n(op: str, inputs: list[str], out: str) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [out])


def silu(order: str = "x_first", alpha: float | None = None, opset: int = 17,
         extra_output: str | None = None, other: bool = False) -> onnx.ModelProto:
    """y = x * Sigmoid(x) [* alpha inside]; ``other``: the Mul reads ``z`` instead of ``x``."""
    nodes, consts = [], {}
    arg = "x"
    if alpha is not None:
        consts["alpha"] = np.array(alpha, np.float32)
        nodes.append(_n("Mul", ["alpha", "x"] if order == "x_first" else ["x", "alpha"], "ax"))
        arg = "ax"
    nodes.append(_n("Sigmoid", [arg], "s"))
    left = "z" if other else "x"
    nodes.append(_n("Mul", [left, "s"] if order == "x_first" else ["s", left], "y"))
    inputs = {"x": SHAPE} | ({"z": SHAPE} if other else {})
    outputs = {"y": None} | ({extra_output: None} if extra_output else {})
    return make_model(nodes, inputs, outputs, consts, opset=opset)


def _swish_alpha(model) -> float:
    (node,) = [n for n in model.graph if n.op_type == "Swish"]
    alpha = node.attributes.get("alpha")
    return alpha.as_float() if alpha is not None else 1.0


@pytest.mark.parametrize("order", ["x_first", "sigmoid_first"])
@pytest.mark.parametrize("alpha", [None, 1.702])
def test_forms_become_one_swish(order: str, alpha: float | None) -> None:
    _, after, counts = canonicalized(silu(order, alpha, opset=24))  # the checker needs Swish
    assert op_counts(after) == {"Swish": 1}
    assert fired(counts) == {"fuse_swish": 1}
    assert _swish_alpha(after) == pytest.approx(alpha or 1.0, rel=1e-6)


def test_a_sigmoid_read_elsewhere_is_left() -> None:
    # the gate is also a graph output: replacing the pair would lose it
    _, after, counts = canonicalized(silu(extra_output="s"))
    assert "Swish" not in op_counts(after) and not counts["fuse_swish"]


def test_a_mul_by_another_tensor_is_left() -> None:
    _, after, counts = canonicalized(silu(other=True))
    assert op_counts(after) == {"Sigmoid": 1, "Mul": 1} and not counts["fuse_swish"]


def test_a_non_constant_alpha_is_left() -> None:
    # Mul(x, Sigmoid(Mul(x, z))): z is an input, not alpha
    nodes = [_n("Mul", ["x", "z"], "ax"), _n("Sigmoid", ["ax"], "s"), _n("Mul", ["x", "s"], "y")]
    _, after, counts = canonicalized(make_model(nodes, {"x": SHAPE, "z": SHAPE}, {"y": None}))
    assert "Swish" not in op_counts(after) and not counts["fuse_swish"]


def test_a_qdq_silu_is_left() -> None:
    # as onnxruntime's quantizer writes it: Q/DQ between the Sigmoid and the Mul, and the Mul's
    # operands each with their own scale; float Swish has no place in an int8 kernel
    g = QDQGraph((1, 4, 8, 8))
    c = g.conv(g.act(g.x, 0.05, 10), 0.05, 4, 8, pads=[1, 1, 1, 1])
    x = g.act(g.q(c, 0.08, 0), 0.08, 0)
    s = g.act(g.q(g.op("Sigmoid", [x]), 1 / 256, -128), 1 / 256, -128)
    y = g.op("Mul", [x, s])
    model = import_model(g.model(g.act(g.q(y, 0.04, -20), 0.04, -20)))
    counts = canonicalize(model)
    assert "Swish" not in op_counts(model) and "Sigmoid" in op_counts(model)
    assert not counts["fuse_swish"]


def _emitted_matches(proto: onnx.ModelProto) -> onnx.ModelProto:
    return emitted_matches(proto, "Swish")


@pytest.mark.parametrize("alpha", [None, 0.5])
def test_opset17_is_written_back_as_sigmoid_and_mul(alpha: float | None) -> None:
    out = _emitted_matches(silu(alpha=alpha, opset=17))
    ops = sorted(n.op_type for n in out.graph.node)
    assert ops == (["Mul", "Sigmoid"] if alpha is None else ["Mul", "Mul", "Sigmoid"])
    assert out.opset_import[0].version == 17


def test_opset24_keeps_swish() -> None:
    out = _emitted_matches(silu(alpha=1.5, opset=24))
    assert [n.op_type for n in out.graph.node] == ["Swish"]


def test_swish_costs_what_sigmoid_and_mul_cost() -> None:
    """Recognising SiLU as one op changes no FLOP total (ops.py: Sigmoid 4 + Mul 1 per element)."""
    from tests.helpers.flops import op_flops as _flops

    one = _flops("""g (float[2,10] x) => (float[2,10] y) {
        y = Swish<alpha = 1.5>(x)
    }""", opset=24)
    parts = _flops("""g (float[2,10] x) => (float[2,10] y) {
        s = Sigmoid(x)
        y = Mul(x, s)
    }""")
    assert parts == {"Sigmoid": 4 * 20, "Mul": 20}
    assert one == {"Swish": sum(parts.values())}
