"""LSTM and GRU float C kernels (opfuse/backends/c/recurrent.py) against onnxruntime: directions,
optional inputs and outputs, peepholes, clip, constant sequence lengths, linear_before_reset, and
the batch-major layout (which onnxruntime refuses: compared with the layout-0 model's outputs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from opfuse.backends.c import emit_c
from opfuse.errors import Unsupported
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.c_float import validate_c
from opfuse.pipeline import compile_model
from opfuse.safe_text import assert_inert
from tests.helpers.recurrent import recurrent_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


CASES = {
    "lstm_forward": {},
    "lstm_reverse": {"direction": "reverse", "batch": 3},
    "lstm_bidirectional": {"direction": "bidirectional", "steps": 4, "hidden": 6},
    "lstm_peepholes_clip": {"peepholes": True, "clip": 0.75},
    "lstm_short_sequences": {"lens": [5, 2], "direction": "bidirectional"},
    "lstm_empty_sequence": {"lens": [0, 3]},
    "gru_empty_sequence": {"op": "GRU", "lens": [0, 2], "direction": "bidirectional"},
    "lstm_state_on_stack": {"outputs": ("y",), "states": False},
    "lstm_final_state_only": {"outputs": ("yh",), "hidden": 16, "size": 10, "steps": 9},
    "lstm_relu_cell": {"activations": ["Sigmoid", "Relu", "Tanh"]},
    "gru_forward": {"op": "GRU"},
    "gru_reverse_wide": {"op": "GRU", "direction": "reverse", "batch": 3, "hidden": 8, "size": 5,
                         "steps": 7},
    "gru_linear_before_reset": {"op": "GRU", "linear_before_reset": 1,
                                "direction": "bidirectional"},
    "gru_clip_no_state": {"op": "GRU", "clip": 0.5, "states": False, "outputs": ("yh",)},
}


@pytest.mark.parametrize("case", list(CASES))
def test_recurrent_kernel_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.onnx"
    onnx.save(recurrent_model(**CASES[case]), path)
    report = validate_c(path, outdir=tmp_path / "c")
    assert report.ok, report
    for out in report.outputs:
        assert out.max_abs_err <= 1e-5 * max(out.max_ref, 1.0), out


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_batch_major_layout_matches_the_sequence_major_model(op: str, tmp_path: Path) -> None:
    """onnxruntime refuses layout=1: the C of the layout-1 model must give the layout-0 model's
    onnxruntime outputs, transposed."""
    kw = {"op": op, "direction": "bidirectional", "steps": 4, "batch": 3}
    major = recurrent_model(layout=1, **kw)
    onnx.save(major, tmp_path / "major.onnx")
    folder = tmp_path / "c"
    emit_c(compile_model(tmp_path / "major.onnx"), folder)
    build_shared(folder)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 3)).astype(np.float32)  # (batch, steps, size)
    states = {s: rng.standard_normal((3, 2, 4)).astype(np.float32)
              for s in (("h0", "c0") if op == "LSTM" else ("h0",))}
    got = CModel(folder).run({"x": x, **states})
    sess = ort.InferenceSession(recurrent_model(**kw).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    feeds = {"x": x.transpose(1, 0, 2), **{k: v.transpose(1, 0, 2) for k, v in states.items()}}
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    np.testing.assert_allclose(got["y"], ref["y"].transpose(2, 0, 1, 3), atol=1e-5)
    np.testing.assert_allclose(got["yh"], ref["yh"].transpose(1, 0, 2), atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("lens", [[5, 2, 0], [1, 5, 3]])
def test_run_time_sequence_lengths_match_onnxruntime(op: str, lens: list[int],
                                                     tmp_path: Path) -> None:
    model = recurrent_model(op=op, batch=3, direction="bidirectional")
    model.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [3]))
    model.graph.node[0].input[4] = "lens"
    onnx.save(model, tmp_path / "m.onnx")
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((5, 3, 3)).astype(np.float32),
             "lens": np.array(lens, np.int32),
             **{s: rng.standard_normal((2, 3, 4)).astype(np.float32)
                for s in (("h0", "c0") if op == "LSTM" else ("h0",))}}
    report = validate_c(tmp_path / "m.onnx", inputs=feeds, outdir=tmp_path / "c")
    assert report.ok, report


def test_an_unsupported_activation_is_refused_in_one_line(tmp_path: Path) -> None:
    onnx.save(recurrent_model(activations=["HardSigmoid", "Tanh", "Tanh"]), tmp_path / "m.onnx")
    with pytest.raises(Unsupported, match="activation HardSigmoid") as info:
        emit_c(compile_model(tmp_path / "m.onnx"), tmp_path / "c")
    assert "\n" not in str(info.value)


def test_gate_sums_are_counted_as_stack_scratch(tmp_path: Path) -> None:
    onnx.save(recurrent_model(hidden=16, outputs=("y",), states=False), tmp_path / "m.onnx")
    emitted = emit_c(compile_model(tmp_path / "m.onnx"), tmp_path / "c")
    # 4 gates x 16 units of sums, and h and c on the stack (no Y_h, Y_c to keep them in)
    assert emitted.stack_scratch_bytes >= (64 + 16 + 16) * 4


TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                    reason="needs gcc-arm-none-eabi and qemu-system-arm")
@pytest.mark.parametrize("case", [
    {"op": "LSTM", "direction": "bidirectional"},
    {"op": "GRU", "linear_before_reset": 1},
])
def test_recurrent_kernel_on_cortex_m7_under_qemu(case: dict, tmp_path: Path) -> None:
    from opfuse.measure.run.qemu import emulate_c

    onnx.save(recurrent_model(steps=6, batch=1, size=5, hidden=8, **case), tmp_path / "m.onnx")
    emu = emulate_c(compile_model(tmp_path / "m.onnx", "cortex-m7"), outdir=tmp_path / "c",
                    cascades=False)
    assert emu.report.ok, emu.report
    for out in emu.report.outputs:
        assert out.max_abs_err <= 1e-5 * max(out.max_ref, 1.0), out


def _renamed(model: onnx.ModelProto, rename: dict[str, str]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for v in (*graph.input, *graph.output, *graph.initializer):
        v.name = rename.get(v.name, v.name)
    for node in graph.node:
        node.name = rename.get("node", node.name)
        node.input[:] = [rename.get(n, n) for n in node.input]
        node.output[:] = [rename.get(n, n) for n in node.output]
    return out


def _kernel_text(folder: Path) -> str:
    text = (folder / "model.c").read_text()
    start = text.index("static void k0_")
    return text[start:text.index("\n}\n", start)]


def test_names_from_the_model_do_not_reach_the_kernel(tmp_path: Path) -> None:
    """A node and values named to break out of a C comment or a shell give the same kernel and
    weights as plain names (the weights are keyed by the node's name only inside opfuse)."""
    model = recurrent_model(peepholes=True)
    hostile = {"node": "*/ int evil; /*\n??=", "W": "W */", "R": "$(id)", "B": "B\\",
               "P": "P\"", "x": "x\n#define", "h0": "h0 ??/", "y": "y */ }"}
    plain = {"node": "lstm_node"}
    folders = []
    for label, names in (("hostile", hostile), ("plain", plain)):
        onnx.save(_renamed(model, names), tmp_path / f"{label}.onnx")
        folders.append(tmp_path / label)
        emit_c(compile_model(tmp_path / f"{label}.onnx"), folders[-1])
    assert _kernel_text(folders[0]) == _kernel_text(folders[1])
    assert (folders[0] / "weights.c").read_text() == (folders[1] / "weights.c").read_text()
    # elsewhere the names appear only escaped inside comments (safe_text.for_comment)
    assert_inert({s: (folders[0] / s).read_text() for s in ("model.c", "weights.c", "model.h")})
    assert "*/ int evil" not in (folders[0] / "model.c").read_text()
