"""Canonicalization stays exact on int8 graphs (docs/architecture.md, "int8 in the IR"): one test
per rule that reads quantization parameters; onnxruntime on the source QDQ graph is the reference."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

import opfuse.api as api
from opfuse.frontends import import_proto
from opfuse.passes import canonicalize
from opfuse.quant import get_quant, make_params, set_quant
from tests.helpers.passes import make_model
from tests.helpers.qdq_builder import QDQGraph
from tests.helpers.quant import compile_model_from, random_inputs, session


def _check(source, result, step: float) -> None:
    ref, got = session(source), session(api.emit(result))
    for seed in range(3):
        feeds = random_inputs(source, seed)
        assert np.all(np.abs(ref.run(None, feeds)[0] - got.run(None, feeds)[0]) <= step * 1.001)


def _pad_then(consumer: str, value: float | None, pad_scale: float = 0.05, pad_zp: int = 10):
    """x -> Q(0.05, 10) -> DQ -> Pad(value) -> Q -> DQ -> consumer -> Q -> DQ."""
    g = QDQGraph((1, 4, 6, 6))
    pads = g.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))
    inputs = [g.act(g.x, 0.05, 10), pads]
    if value is not None:
        inputs.append(g.const(np.float32(value)))
    p = g.act(g.q(g.op("Pad", inputs), pad_scale, pad_zp), pad_scale, pad_zp)
    if consumer == "Conv":
        y = g.conv(p, pad_scale, 4, 4)
    else:
        y = g.op(consumer, [p], kernel_shape=[3, 3])
    return g.model(g.act(g.q(y, 0.05, -3), 0.05, -3))


@pytest.mark.parametrize(
    ("consumer", "value", "folds"),
    [
        ("Conv", 0.0, True),  # real 0 is the zero point 10: exact
        ("Conv", None, True),  # the default pad value is real 0 too
        ("Conv", 1.0, False),  # pad value 30 (quantized) is not the zero point
        ("AveragePool", 0.0, True),
        ("AveragePool", 0.5, False),
        ("MaxPool", -100.0, True),  # saturates to -128: no input is below it
        ("MaxPool", 0.5, False),
    ],
)
def test_int8_pad_folds_only_at_the_zero_point(consumer, value, folds):
    source = _pad_then(consumer, value)
    result = compile_model_from(source, "cortex-m7")
    name = {"Conv": "fuse_pad_into_conv", "AveragePool": "fuse_pad_into_avgpool",
            "MaxPool": "fuse_pad_into_maxpool"}[consumer]  # fmt: skip
    assert result.passes[name] == int(folds)
    assert ("Pad" in [n.op_type for n in result.optimized.graph]) != folds
    node = next(n for n in result.optimized.graph if n.op_type == consumer)
    assert get_quant(node.outputs[0]) is not None  # the rewritten node kept its params
    _check(source, result, 0.05)


def test_int8_pad_that_requantizes_does_not_fold():
    source = _pad_then("Conv", 0.0, pad_scale=0.07, pad_zp=10)
    result = compile_model_from(source, "cortex-m7")
    assert result.passes["fuse_pad_into_conv"] == 0
    _check(source, result, 0.05)


@pytest.mark.parametrize(("out_scale", "removed"), [(0.05, True), (0.08, False)])
def test_noop_reshape_goes_only_when_it_does_not_requantize(out_scale, removed):
    """An int8 Reshape to its own shape (the frontend's folder drops float ones before the QDQ
    fold, so the graph is built in the IR): removing it is exact only on equal params."""
    int8 = ir.TensorType(ir.DataType.INT8)
    x = ir.Value(name="x", shape=ir.Shape([1, 4, 6, 6]), type=int8)
    dims = ir.Value(name="dims", const_value=ir.tensor(np.array([1, 4, 6, 6], np.int64)))
    dims.shape, dims.type = ir.Shape([4]), ir.TensorType(ir.DataType.INT64)
    reshape = ir.Node("", "Reshape", [x, dims], name="reshape")
    relu = ir.Node("", "Relu", [reshape.outputs[0]], name="relu")
    for value, scale in ((x, 0.05), (reshape.outputs[0], out_scale), (relu.outputs[0], out_scale)):
        value.shape, value.type = ir.Shape([1, 4, 6, 6]), int8
        set_quant(value, make_params(scale, 10))
    relu.outputs[0].name = "y"
    graph = ir.Graph([x], [relu.outputs[0]], nodes=[reshape, relu], initializers=[dims],
                     opset_imports={"": 17})  # fmt: skip
    model = ir.Model(graph, ir_version=8)
    counts = canonicalize(model)
    assert counts["remove_noop_reshape"] == int(removed)
    assert [n.op_type for n in model.graph] == (["Relu"] if removed else ["Reshape", "Relu"])


def test_merged_transposes_keep_params():
    g = QDQGraph((1, 4, 6, 6))
    t = g.op("Transpose", [g.act(g.x, 0.05, 10)], perm=[0, 2, 3, 1])
    t = g.op("Transpose", [g.act(g.q(t, 0.05, 10), 0.05, 10)], perm=[0, 3, 1, 2])
    t = g.op("Transpose", [g.act(g.q(t, 0.05, 10), 0.05, 10)], perm=[0, 1, 3, 2])
    y = g.op("Sigmoid", [g.act(g.q(t, 0.05, 10), 0.05, 10)])
    source = g.model(g.act(g.q(y, 1 / 256, -128), 1 / 256, -128))
    result = compile_model_from(source, "cortex-m7")
    assert result.passes["merge_transposes"] >= 1
    transposes = [n for n in result.optimized.graph if n.op_type == "Transpose"]
    assert len(transposes) == 1 and get_quant(transposes[0].outputs[0]) is not None
    _check(source, result, 1 / 256)


def _annotated_conv_then(op_type: str, operands: dict[str, np.ndarray]):
    """A float Conv -> op_type model, then annotated as int8 by hand (weights and activations):
    the shape a quantized graph has where these folds would apply."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((4, 4, 3, 3)).astype(np.float32)}
    inits.update(operands)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node(op_type, ["c", *operands], ["y"], name="after")]  # fmt: skip
    model = import_proto(make_model(nodes, {"x": (1, 4, 6, 6)}, {"y": None}, inits), "annotated")
    conv = next(n for n in model.graph if n.op_type == "Conv")
    set_quant(conv.inputs[1], make_params(np.full(4, 0.01), 0, axis=0))
    set_quant(conv.outputs[0], make_params(0.05, 3))
    return model


def test_batchnorm_is_not_folded_into_int8_weights():
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    model = _annotated_conv_then(
        "BatchNormalization", {"g": ones * 2, "b": zeros, "m": zeros, "v": ones}
    )
    counts = canonicalize(model)
    assert counts["fuse_bn_into_conv"] == 0
    assert "BatchNormalization" in [n.op_type for n in model.graph] or counts["batchnorm_to_mul_add"]


def test_affine_is_not_folded_into_int8_weights():
    model = _annotated_conv_then("Mul", {"k": np.full((1, 4, 1, 1), 2.0, np.float32)})
    counts = canonicalize(model)
    assert counts["fold_affine_into_linear"] == 0
    assert [n.op_type for n in model.graph] == ["Conv", "Mul"]
