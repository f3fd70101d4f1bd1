"""Partitioner over every shared model and every target: invariants, and targets that differ."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from opfuse.frontends import load_onnx
from opfuse.fusion import REASONS, partition, trivial_partition
from opfuse.targets import list_targets, load_target

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "onnx"
MODELS = sorted(p.name for p in SHARED.glob("*.onnx"))
pytestmark = pytest.mark.skipif(not MODELS, reason=f"../shared/models not present ({SHARED})")


@cache
def model(name: str):
    # Imported, not canonicalized: BatchNorm is still there (passes are tested on their own).
    return load_onnx(SHARED / name)


def test_the_shared_models_are_there():
    assert "mobilenet_v2_128_0.5.onnx" in MODELS and "conv_bn_relu_maxpool_test.onnx" in MODELS


@pytest.mark.parametrize("name", MODELS)
def test_every_target_gives_a_valid_partition(name):
    m = model(name)
    nodes = list(m.graph)
    position = {n.name: i for i, n in enumerate(nodes)}
    for target in [*list_targets(), None]:
        part = trivial_partition(m) if target is None else partition(m, load_target(target))
        kernel_of = {n: i for i, k in enumerate(part.kernels) for n in k.nodes}
        assert len(kernel_of) == len(nodes) == sum(len(k.nodes) for k in part.kernels)
        assert len({k.name for k in part.kernels}) == len(part.kernels)
        produced_by = {v.name: kernel_of[n.name] for n in nodes for v in n.outputs}
        for i, kernel in enumerate(part.kernels):
            assert [position[n] for n in kernel.nodes] == sorted(position[n] for n in kernel.nodes)
            assert all(produced_by.get(v, -1) < i for v in kernel.inputs), (target, kernel.name)
            assert kernel.outputs, (target, kernel.name)
        decided = {(d.producer, d.consumer) for d in part.decisions}
        assert all(d.reason in REASONS and not d.fused and d.message for d in part.decisions)
        if target is None:
            assert part.decisions == ()
            continue
        assert len(decided) == len(part.decisions)
        for n in nodes:
            for v in n.inputs:
                p = v.producer() if v is not None else None
                if p is not None and kernel_of[p.name] != kernel_of[n.name]:
                    assert (p.name, n.name) in decided, (target, p.name, n.name)


def test_conv_with_weights_as_graph_inputs_keeps_its_batchnorm():
    m = model("conv_bn_relu_maxpool_test.onnx")
    conv = next(n for n in m.graph if n.op_type == "Conv")
    bn = next(n for n in m.graph if n.op_type == "BatchNormalization")
    for target in list_targets():
        part = partition(m, load_target(target))
        edge = [d for d in part.decisions if (d.producer, d.consumer) == (conv.name, bn.name)]
        assert [d.reason for d in edge] == ["non_constant_weights"], target
        assert part.kernel_of(conv.name).nodes == (conv.name,)


def test_mobilenet_v2_differs_between_cortex_m7_and_mobile_gpu():
    m = model("mobilenet_v2_128_0.5.onnx")
    m7 = partition(m, load_target("cortex-m7"), cascades=False)  # layer by layer
    gpu = partition(m, load_target("mobile-gpu"))
    assert len(gpu.kernels) < len(m7.kernels)
    # Residual adds: their own kernels on the MCU, the conv's output stage on the GPU.
    adds = [
        n for n in m.graph if n.op_type == "Add" and not any(i.is_initializer() for i in n.inputs)
    ]
    assert adds
    joined = [a for a in adds if gpu.kernel_of(a.name).ops[0] == "Conv"]
    assert joined
    for add in joined:
        assert m7.kernel_of(add.name).ops[0] == "Add"
        (d,) = [
            d for d in m7.decisions if d.consumer == add.name and d.reason != "multiple_consumers"
        ]
        assert d.reason == "not_supported_by_target"
        assert d.message.endswith(
            "on cortex-m7: its kernels apply only a clamp in the output stage"
        )
    # Conv+Clip (ReLU6) is one kernel on both.
    assert any(k.ops == ("Conv", "Clip") for k in m7.kernels)
    assert any(k.ops == ("Conv", "Clip") for k in gpu.kernels)
    # The classifier's bias add joins the MatMul on both: it is the fully connected kernel's bias,
    # not an arithmetic epilogue (fusion/transformer.py), even where the output stage is a clamp.
    assert any(k.ops == ("MatMul", "Add") for k in gpu.kernels)
    assert any(k.ops == ("MatMul", "Add") for k in m7.kernels)


def test_unknown_op_in_a_shared_model_is_named():
    # Turn the first Relu of light_squeezenet into a custom-domain op: it must compile, stay its
    # own kernel and be named as the blocker of every edge it touches.
    import onnx

    from opfuse.frontends import import_proto

    proto = onnx.load(SHARED / "light_squeezenet.onnx")
    relu = next(n for n in proto.graph.node if n.op_type == "Relu")
    relu.op_type, relu.domain = "FancyRelu", "custom.ops"
    proto.opset_import.add(domain="custom.ops", version=1)
    shaped = onnx.shape_inference.infer_shapes(onnx.load(SHARED / "light_squeezenet.onnx"))
    proto.graph.value_info.extend(v for v in shaped.graph.value_info if v.name == relu.output[0])
    m = import_proto(proto, "squeezenet-with-custom-op")
    part = partition(m, load_target("mobile-gpu"))
    opaque = [d for d in part.decisions if d.reason == "opaque_op"]
    assert len(opaque) >= 2 and all("FancyRelu" in d.message for d in opaque)
    assert any(k.ops == ("FancyRelu",) for k in part.kernels)
