"""Bad .tflite input: one line naming the file (and operator), exit 2, nothing written."""

from __future__ import annotations

import struct

import pytest

from tests.helpers.cli import assert_clean_error, compile_refused
from tests.helpers.shared import REPO

SHARED_TFLITE = REPO.parent / "shared" / "models" / "tflite"


def _model_bytes(name: str) -> bytes:
    path = SHARED_TFLITE / f"{name}.tflite"
    if not path.is_file():
        pytest.skip("../shared/models not present")
    return path.read_bytes()




def _patch_opcode(data: bytes, old: str, new: str) -> bytes:
    """Rewrite every operator code ``old`` to ``new`` in a copy of a model's bytes."""
    import tflite
    from tflite.BuiltinOperator import BuiltinOperator

    old_code, new_code = getattr(BuiltinOperator, old), getattr(BuiltinOperator, new)
    buf = bytearray(data)
    model = tflite.Model.GetRootAsModel(buf, 0)
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        if max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) != old_code:
            continue
        table = code._tab
        if table.Offset(4):  # deprecated_builtin_code (int8)
            struct.pack_into("<b", buf, table.Pos + table.Offset(4), min(new_code, 127))
        if table.Offset(10):  # builtin_code (int32)
            struct.pack_into("<i", buf, table.Pos + table.Offset(10), new_code)
    return bytes(buf)


def _patch_input_type(data: bytes, type_name: str) -> bytes:
    """Give the first graph input another TensorType in a copy of a model's bytes."""
    import tflite
    from tflite.TensorType import TensorType

    buf = bytearray(data)
    graph = tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0)
    table = graph.Tensors(graph.Inputs(0))._tab
    assert table.Offset(6), "the type field must be stored to patch it"
    struct.pack_into("<b", buf, table.Pos + table.Offset(6), getattr(TensorType, type_name))
    return bytes(buf)


def test_truncated_tflite(run_cli, tmp_path):
    data = _model_bytes("kws_ref_model")
    model = tmp_path / "truncated.tflite"
    model.write_bytes(data[: len(data) // 3])
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "truncated.tflite", "truncated or corrupt")


@pytest.mark.parametrize("content", [b"hello, not a model\n", b"", b"\x08\x07\x12\x05onnx"])
def test_not_a_tflite_file(run_cli, tmp_path, content):
    model = tmp_path / "foreign.tflite"
    model.write_bytes(content)
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "foreign.tflite", "not a TFLite model")


def test_op_without_importer_is_named_with_its_index(run_cli, tmp_path):
    model = tmp_path / "logsoftmax.tflite"
    model.write_bytes(_patch_opcode(_model_bytes("kws_ref_model"), "SOFTMAX", "LOG_SOFTMAX"))
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "logsoftmax.tflite", "operator 12", "LOG_SOFTMAX",
                        "no importer")


def test_int16_activations_are_refused(run_cli, tmp_path):
    model = tmp_path / "int16.tflite"
    model.write_bytes(_patch_input_type(_model_bytes("kws_ref_model"), "INT16"))
    code, err = compile_refused(run_cli, model, tmp_path)
    assert_clean_error(code, err, "int16.tflite", "int16 activation")


def test_validate_refuses_a_truncated_tflite(run_cli, tmp_path):
    data = _model_bytes("kws_ref_model")
    model = tmp_path / "cut.tflite"
    model.write_bytes(data[:100])
    code, _, err = run_cli("validate", str(model), str(tmp_path / "any.onnx"))
    assert_clean_error(code, err, "cut.tflite")
