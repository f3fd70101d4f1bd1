"""The built-in model library: valid ONNX, runnable, deterministic, the right architecture, and
BatchNorm left unfused with statistics a training framework would leave."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from opfuse.errors import OpfuseError
from opfuse.models import MODELS, ModelSpec, build_model

NAMES = sorted(MODELS)

EXPECTED_OPS: dict[str, dict[str, int]] = {
    "seed_block": {"Conv": 2, "BatchNormalization": 2, "Clip": 2},
    "seed_pipeline": {"Conv": 2, "BatchNormalization": 1, "Relu": 1, "MaxPool": 1},
    "mobilenet_v2": {
        "Conv": 52, "BatchNormalization": 52, "Clip": 35, "Add": 10,
        "GlobalAveragePool": 1, "Reshape": 1, "Gemm": 1,
    },
    "resnet18": {
        "Conv": 20, "BatchNormalization": 20, "Relu": 17, "Add": 8, "MaxPool": 1,
        "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1,
    },
    "ds_cnn": {
        "Conv": 9, "BatchNormalization": 9, "Relu": 9, "AveragePool": 1, "Flatten": 1, "Gemm": 1,
    },
    "tiny_transformer": {
        "LayerNormalization": 5, "MatMul": 16, "Add": 19, "Reshape": 8, "Transpose": 8,
        "Softmax": 2, "Mul": 6, "Div": 2, "Erf": 2,
    },
}

IO_SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "seed_block": ((1, 32, 56, 56), (1, 64, 56, 56)),
    "seed_pipeline": ((1, 16, 256, 256), (1, 16, 128, 128)),
    "mobilenet_v2": ((1, 3, 224, 224), (1, 1000)),
    "resnet18": ((1, 3, 224, 224), (1, 1000)),
    "ds_cnn": ((1, 1, 49, 10), (1, 12)),
    "tiny_transformer": ((1, 64, 64), (1, 64, 64)),
}

# parameter counts of the reference architectures (torchvision: 3,504,872 and 11,689,512), plus
# BatchNorm running statistics and the few shared constants (Clip bounds, Reshape shapes)
EXPECTED_PARAMS = {"mobilenet_v2": 3_504_872 + 2 * 17_056 + 4, "resnet18": 11_689_512 + 2 * 4_800}


def _shape(vi: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)


def _inits(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _run(proto: onnx.ModelProto) -> np.ndarray:
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
    return sess.run(None, {inp.name: x})[0]


def test_registry_and_contract() -> None:
    assert set(NAMES) == set(EXPECTED_OPS)
    for name, spec in MODELS.items():
        assert isinstance(spec, ModelSpec) and spec.name == name and spec.description
    with pytest.raises(dataclasses.FrozenInstanceError):
        MODELS["seed_block"].name = "x"  # type: ignore[misc]


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(OpfuseError) as info:
        build_model("no_such_net")
    assert "no_such_net" in str(info.value)
    for name in NAMES:
        assert name in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_valid_onnx(name: str) -> None:
    proto = build_model(name)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.ir_version == 8
    assert {(o.domain, o.version) for o in proto.opset_import} == {("", 17)}
    names = [n.name for n in proto.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert all(t.data_type == onnx.TensorProto.FLOAT for t in proto.graph.initializer
               if t.data_type != onnx.TensorProto.INT64)
    (inp,), (out,) = proto.graph.input, proto.graph.output
    assert (_shape(inp), _shape(out)) == IO_SHAPES[name]


@pytest.mark.parametrize("name", NAMES)
def test_op_counts(name: str) -> None:
    ops = Counter(n.op_type for n in build_model(name).graph.node)
    assert dict(ops) == EXPECTED_OPS[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMS))
def test_parameter_counts_match_the_reference(name: str) -> None:
    inits = _inits(build_model(name))
    assert sum(a.size for a in inits.values()) == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", NAMES)
def test_runs_in_onnxruntime_with_order_one_outputs(name: str) -> None:
    y = _run(build_model(name))
    assert y.shape == IO_SHAPES[name][1]
    assert np.isfinite(y).all()
    # He-initialised weights and calibrated BN keep activations O(1): comparisons are meaningful
    assert 0.05 < float(y.std()) < 20 and float(np.abs(y).max()) < 100


@pytest.mark.parametrize("name", NAMES)
def test_deterministic(name: str) -> None:
    builder = MODELS[name].build.__wrapped__  # type: ignore[attr-defined]  # bypass the cache
    first = builder().SerializeToString(deterministic=True)
    assert builder().SerializeToString(deterministic=True) == first
    assert build_model(name).SerializeToString(deterministic=True) == first


def test_build_returns_a_fresh_proto() -> None:
    a = build_model("seed_block")
    a.graph.node.pop()
    assert len(build_model("seed_block").graph.node) == 6


@pytest.mark.parametrize("name", [n for n in NAMES if EXPECTED_OPS[n].get("BatchNormalization")])
def test_batchnorm_statistics_are_non_trivial(name: str) -> None:
    proto = build_model(name)
    inits = _inits(proto)
    for node in proto.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        gamma, beta, mean, var = (inits[i] for i in node.input[1:])
        for arr, trivial in ((gamma, 1.0), (beta, 0.0), (mean, 0.0), (var, 1.0)):
            assert arr.dtype == np.float32
            assert np.mean(arr != trivial) > 0.9, f"{node.name}: trivial statistics"
            assert not np.allclose(arr, trivial, atol=1e-3), f"{node.name}: near-trivial statistics"
        assert (var > 0).all()


def test_seed_block_traffic_example() -> None:
    """The seeds' int8 example: 6 kernels / 1,705,984 bytes before, 2 kernels / 501,760 after."""
    proto = onnx.shape_inference.infer_shapes(build_model("seed_block"), strict_mode=True)
    sizes = {vi.name: int(np.prod(_shape(vi)))
             for vi in [*proto.graph.input, *proto.graph.value_info, *proto.graph.output]}
    inits = {t.name for t in proto.graph.initializer}
    nodes = list(proto.graph.node)
    per_node = [sum(sizes[i] for i in n.input if i not in inits) + sizes[n.output[0]] for n in nodes]
    assert len(nodes) == 6 and sum(per_node) == 1_705_984
    # fused: dw conv+bn+relu6 reads the input, writes 56x56x32; pw conv+bn+relu6 writes 56x56x64
    assert sizes["input"] * 2 + sizes["input"] + sizes[nodes[-1].output[0]] == 501_760


def test_seed_pipeline_tensors_are_about_a_million_elements() -> None:
    proto = onnx.shape_inference.infer_shapes(build_model("seed_pipeline"), strict_mode=True)
    full = [vi for vi in [*proto.graph.input, *proto.graph.value_info]]
    assert all(int(np.prod(_shape(vi))) == 1 << 20 for vi in full)


@pytest.mark.parametrize("name", NAMES)
def test_imports_with_static_shapes(name: str) -> None:
    from opfuse.pipeline import load

    model = load(name)
    assert len(list(model.graph)) == len(build_model(name).graph.node)
    for node in model.graph:
        for value in node.outputs:
            assert value.shape is not None and all(isinstance(d, int) for d in value.shape)


@pytest.mark.parametrize("name", NAMES)
def test_compiles_with_batchnorm_folded_and_outputs_kept(name: str) -> None:
    """End to end on the library: every BatchNorm follows a linear op, so none survives."""
    from opfuse.ir.expand import to_portable_proto  # the opset-17 model's Gelu written out
    from opfuse.pipeline import compile_model

    result = compile_model(name, "x86-host")
    assert not [n for n in result.optimized.graph if n.op_type == "BatchNormalization"]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = np.random.default_rng(1).standard_normal(IO_SHAPES[name][0]).astype(np.float32)
    outs = []
    for model in (result.original, result.optimized):
        sess = ort.InferenceSession(to_portable_proto(model).SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        outs.append(sess.run(None, {sess.get_inputs()[0].name: x})[0])
    assert float(np.abs(outs[0] - outs[1]).max()) <= 1e-4 * max(1.0, float(np.abs(outs[0]).max()))
