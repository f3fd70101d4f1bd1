"""Small graphs for the partitioner, and the invariants every partition keeps
(tests/test_fusion*.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from opfuse.frontends import import_proto
from opfuse.fusion import Partition, partition
from opfuse.targets import load_target

SHAPE = [1, 4, 8, 8]


F = TensorProto.FLOAT


def node(
    op: str, inputs: list[str], output: str, name: str | None = None, **attrs
) -> onnx.NodeProto:
    domain = attrs.pop("domain", "")
    return helper.make_node(op, inputs, [output], name=name or output, domain=domain, **attrs)


def build(nodes, outputs=("y",), inputs=("x",), weights=(), value_info=(), out_type=F):
    """Import a graph: inputs/outputs of SHAPE, each weight name a constant of a fitting shape."""
    inits = []
    for name in weights:
        if name.startswith("W"):
            inits.append(numpy_helper.from_array(np.full((4, 4, 1, 1), 0.1, np.float32), name))
        elif name.startswith("G"):  # Gemm weight
            inits.append(numpy_helper.from_array(np.full((16, 16), 0.1, np.float32), name))
        else:  # per-channel vector: BN statistics, bias
            inits.append(numpy_helper.from_array(np.full((4,), 0.5, np.float32), name))
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info(*(i if isinstance(i, tuple) else (i, F, SHAPE)))
            for i in inputs
        ],
        [helper.make_tensor_value_info(o, out_type, None) for o in outputs],
        initializer=inits,
        value_info=[helper.make_tensor_value_info(v, F, SHAPE) for v in value_info],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1)]
    return import_proto(helper.make_model(graph, opset_imports=opsets), "test")


def names(part: Partition) -> list[str]:
    return [k.name for k in part.kernels]


def reasons(part: Partition) -> dict[tuple[str, str], str]:
    return {(d.producer, d.consumer): d.reason for d in part.decisions}


def fuse(model, target: str, cascades: bool = False) -> Partition:
    # the layer-by-layer rules; cascades across kernels are tested in test_cascade.py
    part = partition(model, load_target(target), cascades)
    check_invariants(model, part)
    return part


def check_invariants(model, part: Partition, decisions: bool = True) -> None:
    """Every node in one kernel; kernels in schedule order; every unfused edge has a decision."""
    graph_nodes = list(model.graph)
    members = [n for k in part.kernels for n in k.nodes]
    assert sorted(members) == sorted(n.name for n in graph_nodes)
    kernel_of = {n: i for i, k in enumerate(part.kernels) for n in k.nodes}
    produced_by = {v.name: kernel_of[n.name] for n in graph_nodes for v in n.outputs}
    for i, kernel in enumerate(part.kernels):
        for value in kernel.inputs:  # produced by an earlier kernel, or a graph input/initializer
            assert produced_by.get(value, -1) < i, (kernel.name, value)
    decided = {(d.producer, d.consumer) for d in part.decisions}
    assert all(not d.fused for d in part.decisions)
    if not decisions:
        return
    for n in graph_nodes:
        for value in n.inputs:
            p = value.producer() if value is not None else None
            if p is not None and kernel_of[p.name] != kernel_of[n.name]:
                assert (p.name, n.name) in decided, (p.name, n.name)


def residual():
    return build(
        [
            node("Conv", ["x", "W"], "c", "conv"),
            node("Add", ["c", "x"], "a", "add"),
            node("Relu", ["a"], "y", "relu"),
        ],
        weights=("W",),
    )
