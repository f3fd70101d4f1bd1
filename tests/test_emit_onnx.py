"""Emit ONNX: checker-clean, same outputs as the original, kernels in metadata, --ort fused ops."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.backends.onnx import KERNELS_KEY, NODE_KERNEL_KEY, emit_onnx, read_kernels, save_model
from opfuse.errors import OpfuseError
from opfuse.frontends import import_proto, load_onnx
from opfuse.fusion import Kernel, Partition, partition, trivial_partition
from opfuse.measure.validate.ort import validate
from opfuse.targets import load_target
from tests.helpers.shared import shared_onnx, shared_onnx_models

X86 = load_target("x86-host")


def _emit(model, ort: bool = False) -> onnx.ModelProto:
    proto = emit_onnx(model, partition(model, X86), ort=ort)
    onnx.checker.check_model(proto)
    return proto


def _ops(proto: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for node in proto.graph.node)


@pytest.mark.parametrize("path", shared_onnx_models(), ids=lambda p: p.stem)
def test_shared_models_emit_and_match(path: Path) -> None:
    model = load_onnx(path)
    for ort in (False, True):
        proto = _emit(model, ort=ort)
        assert validate(path, proto).ok


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    for i, node in enumerate(graph.node):
        node.name = node.name or f"n{i}"
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _w(name: str, *shape: int, seed: int = 0) -> onnx.TensorProto:
    arr = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.3
    return numpy_helper.from_array(arr, name)


def _f(name: str, *shape: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _fusable_model() -> onnx.ModelProto:
    """Every pattern the ORT flavor rewrites, plus a Conv whose output is read twice."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"]),  # -> FusedConv(Clip)
        helper.make_node("Conv", ["a1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "a1"], ["s2"]),  # residual
        helper.make_node("Relu", ["s2"], ["a2"]),  # -> FusedConv(Relu, Z=a1)
        helper.make_node("Conv", ["a2", "w3", "b3"], ["c3"], group=8),
        helper.make_node("LeakyRelu", ["c3"], ["a3"], alpha=0.2),
        helper.make_node("Conv", ["a3", "w4", "b4"], ["c4"]),
        helper.make_node("HardSigmoid", ["c4"], ["a4"], alpha=0.3, beta=0.4),
        helper.make_node("Mul", ["a4", "a3"], ["m"]),
        helper.make_node("Flatten", ["m"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wg", "bg"], ["g"], transB=1),
        helper.make_node("Tanh", ["g"], ["t"]),  # -> FusedGemm(Tanh)
        helper.make_node("MatMul", ["t", "wm"], ["mm"]),
        helper.make_node("Add", ["mm", "bm"], ["ma"]),
        helper.make_node("Sigmoid", ["ma"], ["y"]),  # MatMul+Add+Sigmoid -> FusedGemm
    ]
    inits = [
        _w("w1", 8, 4, 3, 3),
        _w("b1", 8),
        _w("w2", 8, 8, 3, 3, seed=1),
        _w("w3", 8, 1, 1, 1, seed=2),
        _w("b3", 8, seed=3),
        _w("w4", 8, 8, 1, 1, seed=4),
        _w("b4", 8, seed=5),
        _w("wg", 16, 8 * 36, seed=6),
        _w("bg", 16, seed=7),
        _w("wm", 16, 5, seed=8),
        _w("bm", 5, seed=9),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
    ]
    return _model(nodes, [_f("x", 1, 4, 6, 6)], [_f("y", 1, 5)], inits)


def test_ort_flavor_fuses_and_matches(tmp_path: Path) -> None:
    original = _fusable_model()
    model = import_proto(original, "fusable")
    standard = _emit(model)
    fused = _emit(model, ort=True)
    ops = _ops(fused)
    assert ops == Counter({"FusedConv": 4, "FusedGemm": 2, "Mul": 1, "Flatten": 1}), ops
    assert any(op.domain == "com.microsoft" for op in fused.opset_import)
    convs = [n for n in fused.graph.node if n.op_type == "FusedConv"]
    acts = [
        helper.get_attribute_value(a) for n in convs for a in n.attribute if a.name == "activation"
    ]
    assert acts == [b"Clip", b"Relu", b"LeakyRelu", b"HardSigmoid"]
    assert len(convs[1].input) == 4 and convs[1].input[3] == convs[0].output[0]  # residual as Z
    assert validate(original, standard).ok
    report = validate(standard, fused)
    assert report.ok, report
    # The rewritten nodes keep their kernel: every node of a fused kernel carries its name.
    kernels = read_kernels(fused)
    for node in fused.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        assert kernels[int(props["opfuse.kernel_index"])]["name"] == props[NODE_KERNEL_KEY]
        assert node.name in kernels[int(props["opfuse.kernel_index"])]["emitted"]
    save_model(fused, tmp_path / "f.onnx")
    assert validate(tmp_path / "f.onnx", standard).ok


def test_ort_flavor_respects_partition_and_shared_values() -> None:
    """A trivial partition (one node per kernel) fuses nothing; a value read twice is kept."""
    model = import_proto(_fusable_model(), "fusable")
    plain = emit_onnx(model, trivial_partition(model), ort=True)
    assert "FusedConv" not in _ops(plain)
    assert not any(op.domain == "com.microsoft" for op in plain.opset_import)
    fused = _emit(model, ort=True)
    names = {o for n in fused.graph.node for o in n.output}
    assert "a3" in names  # LeakyRelu's output feeds the Mul too: it stays materialized


def test_ort_flavor_on_mobilenet_captures_conv_clip() -> None:
    path = shared_onnx("mobilenet_v2_128_0.5.onnx")
    model = load_onnx(path)
    fused = _emit(model, ort=True)
    assert _ops(fused)["FusedConv"] >= 35  # onnxruntime itself fuses 35 Conv+Clip at EXTENDED
    assert validate(path, fused).ok


def test_metadata_round_trip(tmp_path: Path) -> None:
    model = load_onnx(shared_onnx("mobilenet_v2_128_0.5.onnx"))
    part = partition(model, X86)
    sources = {node.name: (f"orig/{node.name}",) for node in model.graph}
    proto = emit_onnx(model, part, source_names=sources)
    save_model(proto, tmp_path / "m.onnx")
    loaded = onnx.load(tmp_path / "m.onnx")
    props = {p.key: p.value for p in loaded.metadata_props}
    assert props["opfuse.target"] == "x86-host"
    assert props["opfuse.version"] and props["opfuse.flavor"] == "onnx"
    kernels = json.loads(props[KERNELS_KEY])
    assert [k["name"] for k in kernels] == [k.name for k in part.kernels]
    for entry, kernel in zip(kernels, part.kernels, strict=True):
        assert entry["ops"] == list(kernel.ops) and entry["nodes"] == list(kernel.nodes)
        assert entry["inputs"] == list(kernel.inputs) and entry["outputs"] == list(kernel.outputs)
        assert entry["emitted"] == list(kernel.nodes)
        assert entry["sources"] == sorted(f"orig/{n}" for n in kernel.nodes)
    assert loaded.ir_version >= 10
    # Every node annotated, node names kept from the imported model.
    assert [n.name for n in loaded.graph.node] == [n.name for n in model.graph]
    for node in loaded.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        assert node.name in part.kernel_of(node.name).nodes
        assert props[NODE_KERNEL_KEY] == part.kernel_of(node.name).name
    # Emitting does not touch the model it was given.
    assert all(not n.metadata_props for n in model.graph)


def test_partition_mismatch_raises() -> None:
    model = load_onnx(shared_onnx("pytorch-converted_test_Conv2d_groups.onnx"))
    wrong = Partition("x86-host", (Kernel("conv", ("nope",), ("Conv",), (), ()),), ())
    with pytest.raises(OpfuseError, match="does not match the model"):
        emit_onnx(model, wrong)


def test_save_refuses_to_overwrite_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_onnx(shared_onnx("pytorch-converted_test_Conv2d_groups.onnx"))
    proto = _emit(model)
    src = tmp_path / "in.onnx"
    src.write_bytes(b"original")
    with pytest.raises(OpfuseError, match="refusing to overwrite"):
        save_model(proto, src, protect=src)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OpfuseError, match="refusing to overwrite"):
        save_model(proto, "./in.onnx", protect=src)  # same file, other spelling
    assert src.read_bytes() == b"original"
    save_model(proto, tmp_path / "out.onnx", protect=src)
    assert onnx.load(tmp_path / "out.onnx").graph.node


def test_failed_save_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_onnx(shared_onnx("pytorch-converted_test_Conv2d_groups.onnx"))
    proto = _emit(model)
    out = tmp_path / "out.onnx"

    def fail(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OpfuseError, match="No space left"):
        save_model(proto, out)
    assert list(tmp_path.iterdir()) == []
    # An existing file survives a failed overwrite untouched.
    out.write_bytes(b"previous")
    with pytest.raises(OpfuseError):
        save_model(proto, out)
    assert out.read_bytes() == b"previous" and list(tmp_path.iterdir()) == [out]
    with pytest.raises(OpfuseError, match="does not exist"):
        save_model(proto, tmp_path / "missing" / "out.onnx")


def test_large_model_saved_with_external_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opfuse.backends.onnx import save as save_module

    monkeypatch.setattr(save_module, "_PROTO_LIMIT", 0)  # pretend the model is over 2 GB
    path = shared_onnx("mobilenet_v2_128_0.5.onnx")
    proto = _emit(load_onnx(path))
    out = tmp_path / "big.onnx"
    save_model(proto, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]
    assert validate(path, out).ok


def test_compiled_resnet18_captures_ort_fusions() -> None:
    """After canonicalization (BN folded), every Conv+Relu and residual Add+Relu is one FusedConv."""
    from opfuse.pipeline import compile_model, source_proto

    result = compile_model("resnet18", "x86-host")
    fused = emit_onnx(result.optimized, result.partition, ort=True)
    onnx.checker.check_model(fused)
    ops = _ops(fused)
    assert ops["FusedConv"] >= 17 and ops["Relu"] == 0 and ops["Add"] == 0, ops
    assert ops["BatchNormalization"] == 0, ops
    assert validate(source_proto("resnet18"), fused).ok
