"""The cost model's FLOPs for the transformer ops match hand counts (opfuse/ops.py, opfuse/ops/norm_formulas.py).

Sources of the hand counts: the ONNX operator spec (onnx/docs/Operators.md), whose function bodies
define LayerNormalization-17 (ReduceMean, Sub, Mul, ReduceMean, Add eps, Sqrt, Reciprocal, Mul,
Mul scale, Add bias), GroupNormalization-18/21 and RMSNormalization-23 (Mul, ReduceMean, Add, Sqrt,
Reciprocal, Mul, Mul scale); InstanceNormalization-6 is ``scale * (x - mean) / sqrt(var + eps) + B``;
Range-11 is ``output[i] = start + i * delta``; Gelu-20 is ``0.5 x (1 + erf(x / sqrt 2))``. Every
elementwise op and reduction of a body costs one FLOP per element it reads, a per-row scalar step one
FLOP per row; Erf costs 8 per element and Tanh 4 (the table's convention for transcendentals).
"""

from __future__ import annotations

import onnx_ir as ir
import pytest

from opfuse import ops
from tests.helpers.flops import op_flops as _flops


def _norm(n: int, rows: int, bias: bool = True) -> int:
    """Mean, variance, inverse deviation, normalize, scale, shift (module doc)."""
    per_element = 1 + 1 + 1 + 1 + 1 + 1 + (1 if bias else 0)  # ReduceMean Sub Mul ReduceMean Mul Mul Add
    per_row = 1 + 1 + 1 + 1 + 1  # the two means' divides, Add eps, Sqrt, Reciprocal
    return per_element * n + per_row * rows


def test_layer_normalization_over_the_last_axis_with_and_without_bias() -> None:
    got = _flops("""g (float[2,3,8] x, float[8] s, float[8] b) => (float[2,3,8] y, float[2,3,8] z) {
        y = LayerNormalization<axis = -1>(x, s, b)
        z = LayerNormalization<axis = -1>(x, s)
    }""")
    assert got["LayerNormalization"] == _norm(48, 6) + _norm(48, 6, bias=False) == 366 + 318


def test_layer_normalization_rows_are_the_dims_before_axis() -> None:
    got = _flops("""g (float[2,3,8] x, float[3,8] s, float[3,8] b) => (float[2,3,8] y) {
        y = LayerNormalization<axis = 1>(x, s, b)
    }""")
    assert got["LayerNormalization"] == _norm(48, 2) == 346


def test_instance_normalization_rows_are_batch_times_channels() -> None:
    got = _flops("""g (float[1,4,5,5] x, float[4] s, float[4] b) => (float[1,4,5,5] y) {
        y = InstanceNormalization<epsilon = 0.00001>(x, s, b)
    }""")
    assert got["InstanceNormalization"] == _norm(100, 4) == 720


@pytest.mark.parametrize(("opset", "params"), [(18, 3), (21, 6)])
def test_group_normalization_rows_are_batch_times_groups(opset: int, params: int) -> None:
    """Opset 18 scales per group, 21 per channel: the same arithmetic either way."""
    got = _flops(f"""g (float[2,6,3,3] x, float[{params}] s, float[{params}] b) => (float[2,6,3,3] y) {{
        y = GroupNormalization<num_groups = 3>(x, s, b)
    }}""", opset=opset)
    assert got["GroupNormalization"] == _norm(108, 6) == 786


def test_rms_normalization_has_no_mean() -> None:
    got = _flops("""g (float[2,4,8] x, float[8] s) => (float[2,4,8] y) {
        y = RMSNormalization<axis = -1>(x, s)
    }""", opset=23)
    n, rows = 64, 8
    assert got["RMSNormalization"] == (1 + 1 + 1 + 1) * n + (1 + 1 + 1 + 1) * rows == 288


def test_gelu_costs_what_its_decomposition_costs() -> None:
    """Gelu (opset 20) and the erf form exporters write (Div, Erf, Add, Mul, Mul) count the same
    FLOPs, so recognizing the pattern as one op changes no FLOP total; the tanh form too."""
    gelu = _flops("""g (float[2,10] x) => (float[2,10] y, float[2,10] t) {
        y = Gelu(x)
        t = Gelu<approximate = "tanh">(x)
    }""", opset=20)
    parts = _flops("""g (float[2,10] x) => (float[2,10] y) {
        r2 = Constant<value = float {1.4142135}>()
        d = Div(x, r2)
        e = Erf(d)
        one = Constant<value = float {1.0}>()
        a = Add(e, one)
        m = Mul(x, a)
        half = Constant<value = float {0.5}>()
        y = Mul(m, half)
    }""")
    assert parts == {"Div": 20, "Erf": 8 * 20, "Add": 20, "Mul": 40}
    assert gelu["Gelu"] == 2 * sum(parts.values()) == 2 * 12 * 20


def test_where_and_comparisons_cost_one_per_output_element() -> None:
    got = _flops("""g (bool[1,1,4] c, float[2,3,4] x, int64[2,3] a, int64[3] b) =>
                    (float[2,3,4] y, bool[2,3] e) {
        one = Constant<value = float[1] {1.0}>()
        y = Where(c, x, one)
        e = Equal(a, b)
    }""")
    assert got == {"Where": 24, "Equal": 6}


def test_data_movement_costs_nothing() -> None:
    got = _flops("""g (float[1,4] x, int64[3,2] i) => (float[3,4] y, float[3,2,4] z) {
        shp = Constant<value = int64[2] {3, 4}>()
        y = Expand(x, shp)
        table = Constant<value = float[5,4] {1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20}>()
        z = Gather<axis = 0>(table, i)
    }""")
    assert got == {"Expand": 0, "Gather": 0}


def test_range_costs_a_multiply_and_an_add_per_element() -> None:
    """A Range the import cannot fold (its inputs are graph inputs) has no static size: built here
    with the size a caller bound."""
    scalar = ir.Shape([])
    start, limit, delta = (ir.Value(name=n, shape=scalar, type=ir.TensorType(ir.DataType.FLOAT))
                           for n in ("start", "limit", "delta"))
    node = ir.Node("", "Range", [start, limit, delta], num_outputs=1)
    node.outputs[0].shape = ir.Shape([7])
    assert ops.kind(node) != ops.OpKind.OPAQUE
    assert ops.flops(node) == 2 * 7


@pytest.mark.parametrize("op", ["LayerNormalization", "InstanceNormalization", "GroupNormalization",
                                "RMSNormalization", "Erf", "Gelu", "Where", "Range", "Equal",
                                "Expand", "Gather"])
def test_known_to_fusion(op: str) -> None:
    assert ops.OPS[op].kind != ops.OpKind.OPAQUE


def test_lstm_and_gru_cost_their_gate_products_and_unit_arithmetic() -> None:
    """Per step, batch entry and direction: every gate row reads x (I) and h (H), 2 FLOPs a
    product; per unit, one bias add per gate, 4 per activation (LSTM: 3 sigmoids, 2 tanh; GRU: 2
    sigmoids, 1 tanh) and the state update (LSTM f*C + i*c, o*h(C): 4; GRU r*H, (1-z)*h + z*H: 5)."""
    steps, batch, size, hidden = 5, 2, 3, 4
    got = _flops(f"""g (float[{steps},{batch},{size}] x) => (float[{steps},2,{batch},{hidden}] y,
        float[{steps},1,{batch},{hidden}] z) {{
        w = RandomNormal<shape = [2, {4 * hidden}, {size}]>()
        r = RandomNormal<shape = [2, {4 * hidden}, {hidden}]>()
        y = LSTM<hidden_size = {hidden}, direction = "bidirectional">(x, w, r)
        gw = RandomNormal<shape = [1, {3 * hidden}, {size}]>()
        gr = RandomNormal<shape = [1, {3 * hidden}, {hidden}]>()
        z = GRU<hidden_size = {hidden}>(x, gw, gr)
    }}""")
    runs = steps * batch
    lstm = 2 * runs * (2 * 4 * hidden * (size + hidden) + hidden * (4 + 5 * 4 + 4))
    gru = runs * (2 * 3 * hidden * (size + hidden) + hidden * (3 + 3 * 4 + 5))
    assert got["LSTM"] == lstm and got["GRU"] == gru


def test_col2im_adds_each_column_entry_once() -> None:
    """torch's nn.Fold: 2 channels of 2x3 blocks at 4x4 positions of a 5x6 image, every entry of
    the [1, 12, 16] columns one add (those in the padding too: the count does not look)."""
    got = _flops("""g (float[1,12,16] x) => (float[1,2,5,6] y) {
        image = Constant<value = int64[2] {5, 6}>()
        block = Constant<value = int64[2] {2, 3}>()
        y = Col2Im(x, image, block)
    }""", opset=18)
    assert got["Col2Im"] == 12 * 16
