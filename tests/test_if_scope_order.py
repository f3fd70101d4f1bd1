"""The import's topological sort counts what a subgraph reads from the outer scope: an If whose
branches read a value made by a chain of nodes stays after that chain (silero VAD's op15 export:
its decoder's If_1 reads the output of the If before it only inside its branch; Kahn's order
over explicit inputs alone put it first, and the import ended in "reads ... before it is
produced")."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from opfuse.frontends.graph_order import sort_or_raise


def _late_read() -> onnx.ModelProto:
    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["a3"], [f"b_{op}"])], op, [],
                                 [helper.make_tensor_value_info(f"b_{op}", TensorProto.FLOAT,
                                                                [1, 4])])

    nodes = [helper.make_node("Relu", ["x"], ["a1"], name="relu"),
             helper.make_node("Neg", ["a1"], ["a2"], name="neg"),
             helper.make_node("Abs", ["a2"], ["a3"], name="abs"),
             helper.make_node("If", ["flag"], ["y"], name="switch", then_branch=branch("Identity"),
                              else_branch=branch("Neg"))]
    graph = helper.make_graph(
        nodes, "late_read", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                             helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def test_the_sort_keeps_an_if_after_what_its_branches_read() -> None:
    graph = _late_read().graph
    sort_or_raise(graph, "late.onnx")
    order = [n.name for n in graph.node]
    assert order.index("switch") > order.index("abs"), order


@pytest.mark.parametrize("bind", [("--input-value", "flag=1"), ("--input-value", "flag=0"), ()])
def test_the_model_compiles_and_onnxruntime_runs_the_output(tmp_path: Path, run_cli,
                                                            bind: tuple[str, ...]) -> None:
    """Bound, the If folds into the branch's nodes where the If stood: after the chain."""
    path = tmp_path / "late.onnx"
    onnx.save(_late_read(), path)
    code, out, err = run_cli("compile", str(path), "-o", str(tmp_path / "o.onnx"), *bind,
                             "--check")
    assert code == 0 and "result: match" in out, err + out
