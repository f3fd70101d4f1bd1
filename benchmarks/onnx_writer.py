"""(library) What the model-writing benchmarks (conv_rows_models.py, convt_models.py) share: a
float value's type, and a graph of nodes saved as an opset-17 ONNX file with its one output ``y``."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper


def float_value(name: str, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(out: Path, name: str, nodes: list, inputs: list, inits: list) -> None:  # noqa: ANN001
    """``out/name.onnx``: the graph of ``nodes`` over ``inputs`` and ``inits``, output ``y``."""
    graph = helper.make_graph(nodes, name, inputs, [float_value("y", None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, out / f"{name}.onnx")
