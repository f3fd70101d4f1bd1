"""Conv chains that form cascades, and targets that stream them (tests/test_cascade.py and the C
cascade tests)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from opfuse.targets import load_target

F = TensorProto.FLOAT


def conv_chain(
    layers: list[dict], size: int = 32, channels: int = 8, residual=None
) -> onnx.ModelProto:
    """x -> conv(+Relu) per layer (``k``, ``s``, ``group``, ``out``, ``pool``, ``gap``) -> y.

    ``residual`` = (first, last): the input of layer ``first`` is added to the output of ``last``."""
    seen: list[str] = []
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    cur, c, h = "x", channels, size
    for i, layer in enumerate(layers):
        seen.append(cur)
        if layer.get("gap"):
            nodes.append(helper.make_node("GlobalAveragePool", [cur], [f"g{i}"], name=f"gap{i}"))
            cur, h = f"g{i}", 1
            continue
        if layer.get("pool"):
            nodes.append(
                helper.make_node(
                    "MaxPool",
                    [cur],
                    [f"p{i}"],
                    name=f"pool{i}",
                    kernel_shape=[2, 2],
                    strides=[2, 2],
                )
            )
            cur, h = f"p{i}", h // 2
            continue
        k, s, group, d = (
            layer.get("k", 1),
            layer.get("s", 1),
            layer.get("group", 1),
            layer.get("d", 1),
        )
        out = layer.get("out", c)
        w = rng.standard_normal((out, c // group, k, k)).astype(np.float32) * 0.3
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [cur, f"w{i}"], [f"c{i}"], name=f"conv{i}",
                                      kernel_shape=[k, k], strides=[s, s], group=group,
                                      dilations=[d, d], pads=[d * (k // 2)] * 4))  # fmt: skip
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        if residual is not None and i == residual[1]:
            nodes.append(
                helper.make_node("Add", [f"r{i}", seen[residual[0]]], [f"a{i}"], name=f"add{i}")
            )
            cur = f"a{i}"
        else:
            cur = f"r{i}"
        c, h = out, (h + 2 * d * (k // 2) - d * (k - 1) - 1) // s + 1
    nodes.append(helper.make_node("Identity", [cur], ["y"], name="out"))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", F, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", F, None)], initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def with_caps(name: str, **caps):
    target = load_target(name)
    return dataclasses.replace(target, fusion=dataclasses.replace(target.fusion, **caps))


def streaming(name: str = "x86-host", **caps):
    """``name`` streaming rows of any width: x86-host's ``cascade_min_width`` keeps short rows
    whole for speed (a policy tested on its own), and the C tests' small chains have short rows."""
    caps.setdefault("cascade_same_arena", True)  # the tests' small chains: cascades to exercise
    return with_caps(name, cascade_min_width=0, **caps)


NUMERIC_CHAINS = {
    "inverted_residual": ([{"k": 1, "out": 24}, {"k": 3, "group": 24}, {"k": 1, "out": 8}],
                          (0, 2), 17),
    "stride_2_and_odd_size": ([{"k": 3, "s": 2, "out": 12}, {"k": 3, "group": 12},
                               {"k": 1, "out": 16}, {"k": 3, "s": 2, "group": 16}], None, 23),
    "dilated_5x5": ([{"k": 1, "out": 12}, {"k": 5, "group": 12, "d": 2}, {"k": 1, "out": 8}],
                    None, 19),
    "conv_then_pool": ([{"k": 3, "out": 12}, {"pool": True}, {"k": 3, "out": 8}], None, 20),
}  # fmt: skip
