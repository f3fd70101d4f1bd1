"""Calibration figures and one-node models the cost tests price (tests/test_cost.py,
tests/test_int8c.py)."""

from __future__ import annotations

import math

import onnx
from onnx import TensorProto, helper

from opfuse.frontends import import_proto
from opfuse.fusion import trivial_partition


def single_node(
    op: str, shapes: list[tuple[int, ...]], out: tuple[int, ...], weights: int = 0, **attrs
):
    """A one-node model: graph inputs for the activations, initializers for the last ``weights``."""
    names = [f"x{i}" for i in range(len(shapes))]
    inits = [
        helper.make_tensor(n, TensorProto.FLOAT, s, [0.5] * math.prod(s))
        for n, s in zip(names[len(names) - weights :], shapes[len(shapes) - weights :], strict=True)
    ]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
        for n, s in zip(names[: len(names) - weights], shapes[: len(shapes) - weights], strict=True)
    ]
    node = helper.make_node(op, names, ["y"], name="n0", **attrs)
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.checker.check_model(proto)
    model = import_proto(proto, "<test>")
    return model, trivial_partition(model)


FIGURES = {
    "cpu": "Test CPU",
    "clock_hz": 3e9,
    "ram_bytes": 16 * 1024**3,
    "peak_macs_per_s": {"fp32": 5e10, "int8": 1e11},
    "dispatch_overhead_s": 3e-6,
    "memory": [
        {"name": "l2", "size_bytes": 1 << 20, "bytes_per_s": 1e11},
        {"name": "dram", "size_bytes": 16 * 1024**3, "bytes_per_s": 2e10},
    ],
    "efficiency": {"conv": 0.8, "depthwise": 0.04},
}


def single_conv(group: int = 1, k: int = 3):
    c = 32
    shapes = [(1, c, 16, 16), (c, c // group, k, k)]
    return single_node("Conv", shapes, (1, c, 17 - k, 17 - k), 1, group=group)
