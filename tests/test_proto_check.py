"""Import refuses structurally broken protos with one line naming the fault (what the fuzzer
found reaching onnx_ir and onnxscript as ValueError, TypeError or IndexError)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.helpers.exports import control_flow, paddle_style


def _short_raw(m: onnx.ModelProto) -> None:
    t = m.graph.initializer[0]
    t.raw_data = t.raw_data[:-3]


def _short_typed(m: onnx.ModelProto) -> None:
    t = m.graph.initializer[1]
    t.float_data.extend(numpy_helper.to_array(t).ravel().tolist()[:-1])
    t.ClearField("raw_data")


def _attr_type(m: onnx.ModelProto) -> None:
    node = next(n for n in m.graph.node if n.op_type == "Constant")
    node.attribute[0].type = onnx.AttributeProto.TENSORS


def _shadow(m: onnx.ModelProto) -> None:
    m.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 3, 16, 17), np.float32), "x"))


def _ghost(m: onnx.ModelProto) -> None:
    m.graph.node[1].input[0] = "ghost"


def _twice(m: onnx.ModelProto) -> None:
    m.graph.node[2].output[0] = m.graph.node[1].output[0]


def _empty_weight(m: onnx.ModelProto) -> None:
    m.graph.node[0].input[1] = ""


def _arity(m: onnx.ModelProto) -> None:
    m.graph.node[1].input.append("c1")  # Relu takes one input


def _not_text(m: onnx.ModelProto) -> None:
    data = bytearray(m.SerializeToString())
    i = data.index(b"Relu")
    data[i + 1] = 0xEE  # 'R\xeelu': invalid UTF-8 in a string field
    m.ParseFromString(bytes(data))


def _huge(m: onnx.ModelProto) -> None:
    t = m.graph.initializer[0]
    t.dims[0] = 1 << 40


def _neg_dim(m: onnx.ModelProto) -> None:
    m.graph.initializer[0].dims[0] = -8


def _bad_dtype(m: onnx.ModelProto) -> None:
    m.graph.initializer[0].data_type = 99


CASES: dict[str, tuple[Callable[[onnx.ModelProto], None], str]] = {
    "raw data short": (_short_raw, "initializer 'w1': data holds 861 bytes, its dims"),
    "typed data short": (_short_typed, "initializer 'b1': data holds 7 elements"),
    "attribute type": (_attr_type, "is declared TENSORS but holds a value of another type"),
    "shadowing initializer": (_shadow, "initializer 'x' [1, 3, 16, 17] shadows the graph input"),
    "undefined name": (_ghost, "node 'relu1' (Relu) reads 'ghost', which no node"),
    "written twice": (_twice, "node 'pool1' (MaxPool) writes 'r1', which node 'relu1'"),
    "empty required input": (_empty_weight, "input 1 ('W') is required but empty"),
    "arity": (_arity, "node 'relu1' (Relu) has 2 inputs; Relu takes 1"),
    "not text": (_not_text, "is not UTF-8 text"),
    "huge tensor": (_huge, "elements (dims [1099511627776"),
    "negative dim": (_neg_dim, "has a negative dim [-8"),
    "unknown dtype": (_bad_dtype, "element type 99 is not supported"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_broken_proto_is_one_line(run_cli, tmp_path: Path, case: str) -> None:
    breaker, expected = CASES[case]
    model = control_flow("If") if case == "attribute type" else paddle_style(1)
    breaker(model)
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    code, out, err = run_cli("compile", str(src), "-o", str(tmp_path / "o.onnx"))
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert expected in line, line
    assert not (tmp_path / "o.onnx").exists()


def test_the_unbroken_models_pass(run_cli, tmp_path: Path) -> None:
    for name, model in (("p", paddle_style(1)), ("c", control_flow("If"))):
        src = tmp_path / f"{name}.onnx"
        src.write_bytes(model.SerializeToString())
        code, _, err = run_cli("compile", str(src), "-o", str(tmp_path / f"{name}_o.onnx"))
        assert code == 0, err


def test_outer_scope_names_are_visible_in_subgraphs(run_cli, tmp_path: Path) -> None:
    """The If branches read 'r' from the enclosing graph: that is not an undefined name."""
    model = control_flow("If")
    then = next(n for n in model.graph.node if n.op_type == "If").attribute[0].g
    assert then.node[0].input[0] == "r"
    then.node[0].input[0] = "nowhere"
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    code, _, err = run_cli("analyze", str(src), "--json", str(tmp_path / "a.json"))
    assert code == 2 and "reads 'nowhere'" in err
