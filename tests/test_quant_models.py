"""Quantized ONNX end to end (docs/architecture.md, "int8 in the IR"): onnxruntime's quantize_static
output of built-in mobilenet_v2 and resnet18 folds into int8 ops, partitions with the target's
reasons, emits QDQ that onnxruntime runs like the source, and analyze counts its own dtypes."""

from __future__ import annotations

import collections
import math

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import opfuse.api as api
from opfuse.analysis import analyze
from opfuse.errors import OpfuseError
from opfuse.quant import QUANT, get_quant
from tests.helpers.cli import assert_clean_error as _assert_clean_error
from tests.helpers.quant import (
    float_builtin,
    ops_model,
    output_scale,
    quantize,
    random_inputs,
    session,
)

pytest.importorskip("onnxruntime.quantization")

SIZES = {"mobilenet_v2": 96, "resnet18": 64}  # smaller inputs than 224: test time
BOUNDARY = ("QuantizeLinear", "DequantizeLinear")


@pytest.fixture(scope="module")
def qmodels(tmp_path_factory) -> dict[tuple[str, str], onnx.ModelProto]:
    """(model, format) -> path of onnxruntime's quantized model (per channel, int8)."""
    found = {}
    for name, size in SIZES.items():
        float_model = float_builtin(name, size)
        for fmt in ("qdq", "qop"):
            folder = tmp_path_factory.mktemp(f"{name}_{fmt}")
            found[name, fmt] = quantize(float_model, folder, fmt)
    return found


def _float_ops(proto: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in proto.graph.node if n.op_type not in BOUNDARY)


@pytest.mark.parametrize("name", list(SIZES))
def test_qdq_folds_to_int8_ops_with_conversions_only_at_float_boundaries(qmodels, name):
    path = qmodels[name, "qdq"]
    result = api.compile(str(path), "x86-host")
    graph = result.optimized.graph
    assert collections.Counter(n.op_type for n in graph if n.op_type not in BOUNDARY) == _float_ops(
        onnx.load(path)
    )
    for node in graph:
        if node.op_type == "QuantizeLinear":  # a float graph input into int8
            assert node.inputs[0].is_graph_input(), node.name
        elif node.op_type == "DequantizeLinear":  # int8 into a float graph output
            assert node.outputs[0].is_graph_output(), node.name
        else:  # every op reads and writes int8 activations with params; weights int8, bias int32
            assert all(get_quant(v) is not None for v in node.outputs), node.name
            assert node.outputs[0].dtype.name == "INT8"
            if node.op_type in ("Conv", "Gemm"):
                w, b = node.inputs[1], node.inputs[2]
                assert (w.dtype.name, b.dtype.name) == ("INT8", "INT32")
                assert get_quant(w).per_channel and get_quant(w).axis == 0
                assert get_quant(w).scale.size == w.shape[0] == get_quant(b).scale.size
    assert result.optimized.meta["opfuse.rounding"] == "onnx"


@pytest.mark.parametrize("name", list(SIZES))
def test_kernel_counts_and_reasons(qmodels, name):
    """cortex-m7: one op per kernel (no clamps are left: onnxruntime folded them into the Q ranges),
    the residual Adds apart; x86-host: each residual Add joins its Conv. Q/DQ run alone with
    dtype_mismatch."""
    source = onnx.load(qmodels[name, "qdq"])
    ops = _float_ops(source)
    boundary = sum(1 for n in source.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in
                   {i.name for i in source.graph.input})  # fmt: skip
    boundary += sum(1 for n in source.graph.node if n.output[0] in {o.name for o in source.graph.output})
    assert boundary == 2
    m7 = api.compile(str(qmodels[name, "qdq"]), "cortex-m7").partition.without_cascades()
    assert len(m7.kernels) == sum(ops.values()) + boundary
    x86 = api.compile(str(qmodels[name, "qdq"]), "x86-host").partition.without_cascades()
    assert len(x86.kernels) == sum(ops.values()) + boundary - ops["Add"]
    assert sum(1 for k in x86.kernels if k.ops == ("Conv", "Add")) == ops["Add"]
    for partition in (m7, x86):
        conversions = [d for d in partition.decisions if "QuantizeLinear" in d.message
                       or "DequantizeLinear" in d.message]  # fmt: skip
        assert len(conversions) == 2 and all(d.reason == "dtype_mismatch" for d in conversions)
    adds = [d for d in m7.decisions if d.message.startswith("Add cannot join Conv")]
    assert adds and all(d.reason in ("not_supported_by_target", "multiple_consumers") for d in adds)
    assert any(d.reason == "not_supported_by_target" for d in adds)


@pytest.mark.parametrize("name", list(SIZES))
def test_emitted_qdq_matches_onnxruntime_on_the_source_within_one_step(qmodels, name, tmp_path):
    path = qmodels[name, "qdq"]
    source = onnx.load(path)
    emitted = api.emit(api.compile(str(path), "cortex-m7"))
    kinds = {n.op_type for n in emitted.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= kinds
    opt = tmp_path / "ort_optimized.onnx"
    ref, got = session(source), session(emitted, optimized=opt)
    assert any(n.op_type == "QLinearConv" for n in onnx.load(opt).graph.node)  # ORT_ENABLE_ALL
    step = output_scale(source)
    for seed in range(3):
        feeds = random_inputs(source, seed)
        want, have = ref.run(None, feeds)[0], got.run(None, feeds)[0]
        assert np.all(np.abs(want - have) <= step * 1.001), name


def test_ort_flavour_refuses_a_quantized_model(qmodels, run_cli, tmp_path):
    with pytest.raises(OpfuseError, match="quantized model"):
        api.emit(api.compile(str(qmodels["resnet18", "qdq"]), "x86-host"), ort=True)
    out = tmp_path / "out.onnx"
    code, _, err = run_cli("compile", str(qmodels["resnet18", "qdq"]), "--ort", "-o", str(out))
    _assert_clean_error(code, err, "--ort", "quantized model")
    assert not out.exists()
    code, _, err = run_cli("compile", str(qmodels["resnet18", "qdq"]), "-o", str(out), "--check")
    assert code == 0, err
    assert out.exists()


@pytest.mark.parametrize("name", list(SIZES))
def test_qoperator_model_imports_to_its_qdq_twin(qmodels, name):
    twin = api.compile(str(qmodels[name, "qdq"]), "x86-host")
    qop = api.compile(str(qmodels[name, "qop"]), "x86-host")
    assert any(n.op_type == "QLinearConv" for n in onnx.load(qmodels[name, "qop"]).graph.node)
    assert [k.ops for k in qop.partition.without_cascades().kernels] == [k.ops for k in twin.partition.without_cascades().kernels]
    a, b = session(api.emit(twin)), session(api.emit(qop))
    feeds = random_inputs(onnx.load(qmodels[name, "qdq"]), 0)
    np.testing.assert_array_equal(a.run(None, feeds)[0], b.run(None, feeds)[0])


@pytest.mark.parametrize("activation", ["int8", "uint8"])
def test_qoperator_ops_match_their_qdq_twin(tmp_path, activation):
    """QLinearLeakyRelu/AveragePool/Sigmoid/Mul/Concat/GlobalAveragePool/MatMul/Add/Softmax."""
    results = {}
    for fmt in ("qdq", "qop"):
        folder = tmp_path / fmt
        folder.mkdir()
        path = quantize(ops_model(), folder, fmt, per_channel=False, activation=activation)
        results[fmt] = (onnx.load(path), api.compile(str(path), "x86-host"))
    source, twin = results["qdq"]
    _, qop = results["qop"]
    assert [k.ops for k in qop.partition.without_cascades().kernels] == [k.ops for k in twin.partition.without_cascades().kernels]
    want = "UINT8" if activation == "uint8" else "INT8"
    assert all(n.outputs[0].dtype.name == want for n in twin.optimized.graph if n.op_type == "Conv")
    feeds = random_inputs(source, 3)
    ref = session(source).run(None, feeds)[0]
    step = output_scale(source)
    for result in (twin, qop):
        got = session(api.emit(result)).run(None, feeds)[0]
        assert np.all(np.abs(ref - got) <= step * 1.001)


def _shapes(proto: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """name -> (elements, element bytes) from onnx's own inference on the source model."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    found = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        t = vi.type.tensor_type
        n = math.prod(d.dim_value for d in t.shape.dim)
        found[vi.name] = (n, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize)
    return found


def test_analyze_counts_int8_activations_and_weights_and_int32_bias(qmodels):
    """Per Conv/Gemm kernel on cortex-m7 (one op each), from the source QDQ model independently:
    activations 1 byte per element (the int8 tensors around its DQ/Q), weights 1 byte, bias 4."""
    source = onnx.load(qmodels["mobilenet_v2", "qdq"])
    shapes = _shapes(source)
    inits = {i.name: numpy_helper.to_array(i) for i in source.graph.initializer}
    producer = {o: n for n in source.graph.node for o in n.output}
    reader = {n.input[0]: n for n in source.graph.node if n.op_type == "QuantizeLinear"}
    result = api.compile(str(qmodels["mobilenet_v2", "qdq"]), "cortex-m7")
    data = analyze(result, precision="fp32", cascades=False)  # per layer
    assert data.precision == "int8" and "ignored" in data.precision_note
    costs = {k.nodes[0]: k for k in data.after.cost.kernels}
    checked = 0
    for node in source.graph.node:
        if node.op_type not in ("Conv", "Gemm"):
            continue
        x_q, w_q, b_q = (producer[i].input[0] for i in node.input)
        assert (inits[w_q].dtype, inits[b_q].dtype) == (np.int8, np.int32)
        y_q = reader[node.output[0]].output[0]
        assert shapes[x_q][1] == shapes[y_q][1] == 1
        cost = costs[node.name]
        assert cost.weight_bytes_read == inits[w_q].size * 1 + inits[b_q].size * 4
        assert cost.activation_bytes_read == shapes[x_q][0]
        assert cost.bytes_written == shapes[y_q][0]
        checked += 1
    assert checked == 53
    assert analyze(result).to_json()["precision"] == "int8"


def test_annotations_survive_only_in_memory(qmodels):
    """QuantParams live in value.meta (never serialized); the emitted file carries QDQ instead."""
    result = api.compile(str(qmodels["resnet18", "qdq"]), "x86-host")
    assert any(QUANT in v.meta for n in result.optimized.graph for v in n.outputs)
    emitted = api.emit(result)
    props = {p.key: p.value for p in emitted.metadata_props}
    assert props["opfuse.rounding"] == "onnx"
