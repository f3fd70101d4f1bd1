"""TFLite's int8 UNIDIRECTIONAL_SEQUENCE_LSTM (frontends/tflite/ops_lstm.py, backends/c/int8/
lstm.py): imported as one int8 LSTM, its C bit-exact with TFLite Micro on 20 seeded inputs
(batch-major and time-major, several batch entries, cell state scales from 2^-15 to 2^-8), on
x86-host and once on cortex-m7 under QEMU; the imported ONNX within a step of TFLite Micro;
the variants TFLite Micro's kernel does not take refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from opfuse.errors import OpfuseError
from opfuse.measure.run.host import CModel
from opfuse.measure.validate.c_int8 import validate_c_int8
from opfuse.pipeline import compile_model
from tests.helpers.lstm_int8 import lstm_int8_model
from tests.helpers.tflite_builder import check_against_tflite

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

CASES = {
    "batch_major": {},
    "time_major_two_entries": {"batch": 2, "time_major": True},
    "batch_major_three_entries": {"batch": 3, "steps": 4, "hidden": 5, "size": 7},
    "fine_cell_scale": {"cell_power": -15, "seed": 1},  # the tanh input shifted right
    "coarse_cell_scale": {"cell_power": -8, "seed": 2},  # the tanh input multiplied up
    "wide": {"hidden": 20, "size": 16, "steps": 10, "seed": 3},
}


@pytest.mark.parametrize("case", list(CASES))
def test_int8_lstm_c_is_bit_exact_with_tflite_micro(case: str, tmp_path: Path) -> None:
    path = lstm_int8_model(tmp_path / "lstm.tflite", **CASES[case])
    report = validate_c_int8(compile_model(path), trials=20, outdir=tmp_path / "c")
    assert report.ok, report
    assert all(out.max_abs_err == 0 for out in report.outputs), report


def test_the_imported_onnx_is_within_a_step_of_tflite_micro(tmp_path: Path) -> None:
    """onnxruntime runs the float LSTM between the QDQ pairs: not TFLite's integers, close."""
    check_against_tflite(lstm_int8_model(tmp_path / "lstm.tflite", batch=2), steps=1)


def test_the_lstm_is_one_int8_kernel(tmp_path: Path) -> None:
    result = compile_model(lstm_int8_model(tmp_path / "lstm.tflite", batch=2, time_major=True))
    kernels = [k for k in result.schedule().partition.kernels if "LSTM" in k.ops]
    assert len(kernels) == 1 and kernels[0].ops == ("LSTM",)


@pytest.mark.parametrize(("change", "message"), [
    ({"CellClip": 3.0}, "cell or projection clip"),
    ({"FusedActivationFunction": 1}, "cell activation 1"),
])
def test_variants_tflite_micro_does_not_run_are_one_line(change: dict, message: str,
                                                         tmp_path: Path) -> None:
    path = lstm_int8_model(tmp_path / "lstm.tflite", options=change)
    with pytest.raises(OpfuseError, match=message) as info:
        compile_model(path)
    assert "\n" not in str(info.value) and "operator 0 (UNIDIRECTIONAL_SEQUENCE_LSTM)" in str(
        info.value)


TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                    reason="needs gcc-arm-none-eabi and qemu-system-arm")
def test_int8_lstm_on_cortex_m7_under_qemu(tmp_path: Path) -> None:
    from opfuse.measure.run.qemu import emulate_c

    path = lstm_int8_model(tmp_path / "lstm.tflite", batch=2, time_major=True, cell_power=-10)
    emu = emulate_c(compile_model(path, "cortex-m7"), outdir=tmp_path / "c", cascades=False)
    assert emu.report.ok, emu.report
    assert all(out.max_abs_err == 0 for out in emu.report.outputs), emu.report


def test_an_onnx_lstm_between_qdq_pairs_stays_float(tmp_path: Path) -> None:
    """Only TFLite's LSTM carries its cell state's scale: between Q/DQ pairs of a QDQ ONNX model
    (weights through DQ too) an LSTM is not folded into an int8 node, which no C could run."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from tests.helpers.recurrent import recurrent_model

    model = recurrent_model(outputs=("y",), states=False)
    graph = model.graph
    lstm = graph.node[0]
    lstm.input[0] = "x_dq"
    lstm.output[0] = "y_f"
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])
    zero = helper.make_tensor("z", TensorProto.INT8, [], [0])
    graph.initializer.extend([scale, zero])
    graph.node.insert(0, helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]))
    graph.node.insert(1, helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_dq"]))
    graph.node.extend([helper.make_node("QuantizeLinear", ["y_f", "s", "z"], ["y_q"]),
                       helper.make_node("DequantizeLinear", ["y_q", "s", "z"], ["y"])])
    for init in list(graph.initializer)[:3]:  # W, R, B as int8 / int32 constants through DQ
        real = onnx.numpy_helper.to_array(init)
        dtype = np.int32 if init.name == "B" else np.int8
        init.CopyFrom(onnx.numpy_helper.from_array(np.round(real / 0.05).astype(dtype),
                                                   f"{init.name}_q"))
        zp = "zb" if init.name == "B_q" else "z"
        graph.node.insert(0, helper.make_node("DequantizeLinear", [init.name, "s", zp],
                                              [init.name[:-2]]))
    graph.initializer.append(helper.make_tensor("zb", TensorProto.INT32, [], [0]))
    onnx.save(model, tmp_path / "m.onnx")
    result = compile_model(tmp_path / "m.onnx")
    (node,) = [n for n in result.optimized.graph if n.op_type == "LSTM"]
    assert node.inputs[0].dtype.name == "FLOAT" and node.inputs[1].dtype.name == "FLOAT"


@pytest.mark.parametrize("time_major", [False, True])
def test_a_float_tflite_lstm_runs_as_the_float_lstm_kernel(time_major: bool,
                                                            tmp_path: Path) -> None:
    """The float UNIDIRECTIONAL_SEQUENCE_LSTM: no Q/DQ, float C, against LiteRT on 20 seeded
    inputs (LiteRT keeps the state variables between runs: the reference resets them)."""
    from opfuse.measure.validate.c_float import validate_c
    from opfuse.measure.validate.source import validate_against_reference

    path = lstm_int8_model(tmp_path / "lstm.tflite", batch=2, time_major=time_major,
                           float_model=True)
    assert validate_c(path, outdir=tmp_path / "c").ok  # and against LiteRT itself:
    model = CModel(tmp_path / "c")
    report = validate_against_reference(path, model.run, label="float C", trials=20)
    assert report.ok, report
    assert all(out.max_abs_err <= 1e-5 for out in report.outputs), report


def test_a_weight_of_the_wrong_shape_is_one_line(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.tflite_builder import TfliteBuilder

    const = TfliteBuilder.const

    def narrowed(self, name, data, **quant):  # noqa: ANN001, ANN202
        return const(self, name, data[:, :-1] if name == "forget_r" else data, **quant)

    monkeypatch.setattr(TfliteBuilder, "const", narrowed)
    path = lstm_int8_model(tmp_path / "lstm.tflite")
    with pytest.raises(OpfuseError, match=r"tensor \d+ has shape \[8, 7\], not \[8, 8\]") as info:
        compile_model(path)
    assert "\n" not in str(info.value)
