"""The QDQ fold, fusion through quantization and QDQ emission on hand-written graphs
(docs/architecture.md, "int8 in the IR"); onnxruntime on the source graph is the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import opfuse.api as api
import opfuse.targets
from opfuse.frontends import import_proto
from opfuse.fusion import partition
from opfuse.ir import infer_shapes
from opfuse.pipeline import compile_model
from opfuse.quant import get_quant
from opfuse.targets import parse_target
from tests.helpers.qdq_builder import QDQGraph, conv_relu
from tests.helpers.quant import compile_model_from, random_inputs, session


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph]


def _by_op(model, op_type: str):
    return next(n for n in model.graph if n.op_type == op_type)


def _assert_matches_source(source, result, step: float) -> None:
    ref, got = session(source), session(api.emit(result))
    for seed in range(3):
        feeds = random_inputs(source, seed)
        diff = np.abs(ref.run(None, feeds)[0] - got.run(None, feeds)[0])
        assert np.all(diff <= step * 1.001), diff.max()


def test_clamp_takes_the_params_of_its_q_on_both_sides():
    model = import_proto(conv_relu(), "conv_relu")
    assert _ops(model) == ["QuantizeLinear", "Conv", "Relu", "DequantizeLinear"]
    conv, relu = _by_op(model, "Conv"), _by_op(model, "Relu")
    assert get_quant(conv.outputs[0]) == get_quant(relu.outputs[0])
    assert float(get_quant(relu.outputs[0]).scale[0]) == pytest.approx(0.04)
    assert int(get_quant(relu.outputs[0]).zero_point[0]) == -128
    assert conv.inputs[0].dtype.name == "INT8" and conv.inputs[2].dtype.name == "INT32"
    assert get_quant(conv.inputs[1]).axis == 0
    assert model.meta["opfuse.rounding"] == "onnx"


def test_clip_bounds_become_int8_on_the_output_params():
    model = import_proto(conv_relu(clamp="Clip"), "conv_clip")
    clip = _by_op(model, "Clip")
    low, high = (v.const_value.numpy() for v in clip.inputs[1:])
    assert (low.dtype, int(low), int(high)) == (np.int8, -128, 22)  # 0 -> zp, 6 / 0.04 - 128


def test_rounding_comes_from_the_models_metadata():
    model = import_proto(conv_relu({"opfuse.rounding": "tflite"}), "m")
    assert model.meta["opfuse.rounding"] == "tflite"


@pytest.mark.parametrize("target", ["cortex-m7", "x86-host", "ethos-u55"])
def test_clamp_folds_into_the_requantization_on_every_int8_target(target):
    result = compile_model_from(conv_relu(), target)
    assert [k.ops for k in result.partition.without_cascades().kernels] == [
        ("QuantizeLinear",), ("Conv", "Relu"), ("DequantizeLinear",)
    ]
    reasons = {d.reason for d in result.partition.without_cascades().decisions}
    assert reasons == {"dtype_mismatch"}


@pytest.mark.parametrize("clamp", ["Relu", "Clip"])
def test_emitted_conv_relu_is_the_qdq_form_onnxruntime_fuses(clamp):
    source = conv_relu(clamp=clamp)
    result = compile_model_from(source, "cortex-m7")
    emitted = api.emit(result)
    ops = [n.op_type for n in emitted.graph.node if n.op_type not in ("DequantizeLinear",)]
    assert ops[ops.index("Conv") + 1] == clamp  # no Q/DQ between a conv and its own clamp
    _assert_matches_source(source, result, 0.04)


def _conv_then(op_type: str, out_scale: float = 0.03, residual: bool = False):
    g = QDQGraph((1, 4, 8, 8))
    x = g.act(g.x, 0.05, 10)
    c = g.conv(x, 0.05, 4, 4, pads=[1, 1, 1, 1])
    c = g.act(g.q(c, 0.06, 3), 0.06, 3)
    if residual:
        y = g.op("Add", [c, x])
    else:
        y = g.op(op_type, [c])
    return g.model(g.act(g.q(y, out_scale, -5), out_scale, -5))


def test_activation_after_an_int8_anchor_needs_requantize_once():
    source = _conv_then("Sigmoid")
    x86 = compile_model_from(source, "x86-host")
    assert ("Conv", "Sigmoid") in [k.ops for k in x86.partition.without_cascades().kernels]
    ethos = compile_model_from(source, "ethos-u55")  # takes an activation, requantizes per op
    assert ("Conv", "Sigmoid") not in [k.ops for k in ethos.partition.without_cascades().kernels]
    refused = [d for d in ethos.partition.without_cascades().decisions if d.message.startswith("Sigmoid cannot join")]
    assert len(refused) == 1 and refused[0].reason == "not_supported_by_target"
    assert "int8_requantize_once = false" in refused[0].message
    _assert_matches_source(source, x86, 0.03)


def test_residual_add_of_int8_values_follows_the_target_capability(tmp_path):
    source = _conv_then("Add", residual=True)
    x86 = compile_model_from(source, "x86-host")
    assert ("Conv", "Add") in [k.ops for k in x86.partition.without_cascades().kernels]
    text = (Path(opfuse.targets.__file__).parent / "x86-host.toml").read_text()
    custom = tmp_path / "no-once.toml"
    custom.write_text(text.replace("int8_requantize_once = true", "int8_requantize_once = false"))
    part = partition(x86.optimized, parse_target(custom), cascades=False)
    assert ("Conv", "Add") not in [k.ops for k in part.kernels]
    add = [d for d in part.decisions if d.message.startswith("Add cannot join Conv")]
    assert add and add[0].reason == "not_supported_by_target" and "int8" in add[0].message
    _assert_matches_source(source, x86, 0.03)


def test_requantize_between_different_params_is_kept():
    g = QDQGraph((1, 4, 8, 8))
    c = g.conv(g.act(g.x, 0.05, 10), 0.05, 4, 4, pads=[1, 1, 1, 1])
    q = g.q(c, 0.06, 3)
    c2 = g.conv(g.act(q, 0.09, -7), 0.09, 4, 4)  # read with other params than written
    source = g.model(g.act(g.q(c2, 0.03, 0), 0.03, 0))
    result = compile_model_from(source, "cortex-m7")
    ops = _ops(result.optimized)
    assert ops.count("QuantizeLinear") == 2 and ops.count("DequantizeLinear") == 2
    requant = [n for n in result.optimized.graph if n.op_type == "QuantizeLinear"][1]
    assert float(get_quant(requant.outputs[0]).scale[0]) == pytest.approx(0.09)
    assert [k.ops for k in result.partition.without_cascades().kernels].count(("Conv",)) == 2
    _assert_matches_source(source, result, 0.03)


def test_infer_shapes_leaves_a_quantized_graph_alone():
    model = import_proto(conv_relu(), "conv_relu")
    before = [(v.name, v.dtype, tuple(v.shape)) for n in model.graph for v in n.outputs]
    infer_shapes(model)  # onnx would reject Conv on int8
    assert [(v.name, v.dtype, tuple(v.shape)) for n in model.graph for v in n.outputs] == before


def test_constant_only_int8_node_is_not_evaluated_as_numpy_int8():
    g = QDQGraph((1, 4, 1, 1))
    big = g.dq(g.const(np.full((1, 4, 1, 1), 100, np.int8)), np.float32(0.05), np.int8(0))
    s = g.op("Add", [big, big])  # 200 overflows int8 as an integer add; 10.0 in real terms
    total = g.op("Add", [g.act(g.q(s, 0.1, 0), 0.1, 0), g.act(g.x, 0.05, 10)])
    source = g.model(g.act(g.q(total, 0.1, 0), 0.1, 0))
    result = compile_model_from(source, "x86-host")
    assert result.passes["fold_constants"] == 0
    _assert_matches_source(source, result, 0.1)


def test_float_pipeline_still_compiles():  # the fold leaves float models untouched
    result = compile_model("seed_block", "x86-host")
    assert not any(get_quant(v) for n in result.optimized.graph for v in n.outputs)


def test_every_quantizable_op_folds_and_runs():
    """A chain through the whole QDQ op table, each op between its own DQ and Q: every op folds
    (no DQ/Q left but the boundary ones) and the emitted QDQ runs like the source."""
    g = QDQGraph((1, 4, 8, 8))
    state = {"q": g.x, "s": 0.05, "z": 10}

    def step(op_type, *extra, scale=0.05, zp=0, **attrs):
        x = g.act(state["q"], state["s"], state["z"])
        y = g.op(op_type, [x, *extra], **attrs)
        state.update(q=g.q(y, scale, zp), s=scale, z=zp)
        return x

    def weight(shape):
        return g.weight(shape)[0]

    x = g.act(state["q"], state["s"], state["z"])
    dw, ws = g.weight((4, 1, 3, 3))
    conv = g.op("Conv", [x, dw, g.bias(ws * np.float32(0.05))], group=4, pads=[1] * 4)
    state.update(q=g.q(conv, 0.05, 0), s=0.05, z=0)
    step("ConvTranspose", weight((4, 4, 2, 2)), strides=[2, 2])
    step("MaxPool", kernel_shape=[2, 2], strides=[2, 2])
    step("AveragePool", kernel_shape=[2, 2], strides=[2, 2])
    step("Pad", g.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)))
    step("Resize", "", g.const(np.array([1, 1, 2, 2], np.float32)), mode="nearest")
    step("DepthToSpace", blocksize=2)
    step("HardSwish")
    step("Tanh", scale=1 / 128)
    step("LeakyRelu", alpha=0.2, scale=1 / 128)
    step("PRelu", g.dq(g.const(np.full((1, 1, 1), 50, np.int8)), np.float32(0.004), np.int8(0)), scale=1 / 128)
    step("Transpose", perm=[0, 1, 3, 2], scale=1 / 128)
    a = g.act(state["q"], state["s"], state["z"])
    state.update(q=g.q(g.op("Concat", [a, a], axis=1), 1 / 128, 0))
    step("Sub", g.dq(g.const(np.full((1, 2, 1, 1), 20, np.int8)), np.float32(0.01), np.int8(0)), scale=1 / 64)
    step("Mul", g.dq(g.const(np.full((1, 2, 1, 1), 90, np.int8)), np.float32(0.02), np.int8(0)), scale=1 / 64)
    step("ReduceMean", axes=[2], keepdims=1, scale=1 / 64)
    step("Squeeze", g.const(np.array([2], np.int64)), scale=1 / 64)
    step("Unsqueeze", g.const(np.array([2], np.int64)), scale=1 / 64)
    step("Reshape", g.const(np.array([1, 2, 4, 6], np.int64)), scale=1 / 64)
    step("GlobalAveragePool", scale=1 / 64)
    step("Flatten", scale=1 / 64)
    w, ws = g.weight((3, 2))
    step("Gemm", w, g.bias(ws / np.float32(64)), transB=1, scale=0.02)
    step("MatMul", g.dq(g.const(np.full((3, 5), 60, np.int8)), np.float32(0.01), np.int8(0)), scale=0.01)
    step("Clip", g.const(np.float32(0.0)), g.const(np.float32(6.0)), scale=0.01, zp=-128)
    step("Relu", scale=0.01, zp=-128)
    step("Softmax", axis=-1, scale=1 / 256, zp=-128)
    step("Sigmoid", scale=1 / 256, zp=-128)
    source = g.model(g.act(state["q"], state["s"], state["z"]))
    result = compile_model_from(source, "cortex-m7")
    ops = _ops(result.optimized)
    assert ops.count("QuantizeLinear") == ops.count("DequantizeLinear") == 1
    float_ops = [n.op_type for n in source.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    # The same ops, each folded once. The layout passes push the Transpose down the chain until it
    # moves only size-1 axes, where it becomes a Reshape: count it as data movement either way.
    def moves(names):
        return sorted("Reshape" if op == "Transpose" else op for op in names
                      if op not in ("QuantizeLinear", "DequantizeLinear"))  # fmt: skip

    assert moves(ops) == moves(float_ops)
    assert all(get_quant(n.outputs[0]) is not None for n in result.optimized.graph
               if n.op_type != "DequantizeLinear")  # fmt: skip
    _assert_matches_source(source, result, 1 / 256)


def test_two_quantizers_of_one_output_keep_a_requantize():
    g = QDQGraph((1, 4, 8, 8))
    c = g.conv(g.act(g.x, 0.05, 10), 0.05, 4, 4, pads=[1, 1, 1, 1])
    a = g.op("Relu", [g.act(g.q(c, 0.06, 3), 0.06, 3)])
    b = g.op("Sigmoid", [g.act(g.q(c, 0.1, 0), 0.1, 0)])
    a = g.act(g.q(a, 0.06, 3), 0.06, 3)
    b = g.act(g.q(b, 1 / 256, -128), 1 / 256, -128)
    source = g.model(g.act(g.q(g.op("Add", [a, b]), 0.07, 0), 0.07, 0))
    result = compile_model_from(source, "cortex-m7")
    conv = _by_op(result.optimized, "Conv")
    assert float(get_quant(conv.outputs[0]).scale[0]) == pytest.approx(0.06)
    requant = [n for n in result.optimized.graph if n.op_type == "QuantizeLinear"][1:]
    assert len(requant) == 1 and float(get_quant(requant[0].outputs[0]).scale[0]) == pytest.approx(0.1)
    assert requant[0].inputs[0].producer().op_type == "DequantizeLinear"
    _assert_matches_source(source, result, 0.07)
