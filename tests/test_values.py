"""The one ``static_dims`` and the one ``const`` every stage asks a value for (opfuse/ir/values.py):
their contract, on values built with onnx_ir directly."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from opfuse.ir.values import const, static_dims


def _value(shape) -> ir.Value:  # noqa: ANN001
    return ir.Value(name="v", shape=None if shape is None else ir.Shape(shape),
                    type=ir.TensorType(ir.DataType.FLOAT))


@pytest.mark.parametrize(("shape", "want"), [
    ((1, 8, 4, 4), (1, 8, 4, 4)),
    ((), ()),  # a scalar is static
    (None, None),  # unknown shape
    (("N", 8), None),  # a symbolic dim
])
def test_static_dims(shape, want) -> None:  # noqa: ANN001
    got = static_dims(_value(shape))
    assert got == want and (got is None or isinstance(got, tuple))


def test_static_dims_of_an_omitted_input() -> None:
    assert static_dims(None) is None


def _constant_node(domain: str = "", **attrs) -> ir.Value:  # noqa: ANN003
    return ir.node("Constant", inputs=[], attributes=attrs, domain=domain).outputs[0]


def test_const_of_an_initializer() -> None:
    v = _value((2,))
    v.const_value = ir.tensor(np.array([1.5, -2.0], np.float32))
    np.testing.assert_array_equal(const(v), [1.5, -2.0])


@pytest.mark.parametrize(("attrs", "want"), [
    ({"value": ir.tensor(np.array([[3, 4]], np.int64))}, [[3, 4]]),
    ({"value_float": 0.25}, 0.25),
    ({"value_ints": [1, 2, 3]}, [1, 2, 3]),
])
def test_const_of_a_constant_node(attrs, want) -> None:  # noqa: ANN001
    np.testing.assert_array_equal(const(_constant_node(**attrs)), want)


def test_const_of_a_computed_value_is_none() -> None:
    x = _value((2,))
    relu = ir.Node("", "Relu", inputs=[x])
    assert const(relu.outputs[0]) is None
    assert const(x) is None and const(None) is None
    # a Constant of another domain is no ONNX Constant
    assert const(_constant_node("com.example", value_float=1.0)) is None
