"""``--input-value`` and If at import (issue 31): a silero-VAD-like model (tests/helpers/
silero_like.py) whose If on the sample rate fails shape inference in the branch not taken; bound,
it folds, compiles to ONNX onnxruntime runs and to C (the LSTM included) that matches onnxruntime;
unbound, the import names the input to bind; an If whose branches agree stays as an opaque op."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from opfuse import api
from tests.helpers.silero_like import silero_like

AUDIO = ("--input-shape", "x=1x256")


@pytest.fixture
def vad(tmp_path: Path) -> Path:
    path = tmp_path / "vad.onnx"
    onnx.save(silero_like(), path)
    return path


def test_onnxruntime_runs_the_model_as_built(vad: Path) -> None:
    """The premise: the model is valid ONNX that onnxruntime runs at 16 kHz (the failing branch
    is only inferred once the audio length is bound)."""
    sess = ort.InferenceSession(str(vad), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"x": np.zeros((1, 256), np.float32), "h": np.zeros((1, 1, 8), np.float32),
                          "c": np.zeros((1, 1, 8), np.float32), "sr": np.array(16000)})
    assert out[0].shape == (1, 1)


def test_an_if_on_an_unbound_input_names_the_input_to_bind(vad: Path, run_cli) -> None:
    code, out, err = run_cli("analyze", str(vad), *AUDIO)
    assert code == 2, err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in err
    assert str(vad) in line and "rate_switch" in line and "--input-value sr=" in line


def test_bound_sample_rate_folds_the_if_and_the_onnx_matches(vad: Path, tmp_path: Path,
                                                              run_cli) -> None:
    out_path = tmp_path / "out.onnx"
    code, out, err = run_cli("compile", str(vad), "-o", str(out_path), *AUDIO,
                             "--input-value", "sr=16000", "--check")
    assert code == 0, err
    assert "result: match" in out
    written = onnx.load(out_path)
    assert "If" not in {n.op_type for n in written.graph.node}
    assert [i.name for i in written.graph.input] == ["x", "h", "c"]
    code, out, err = run_cli("analyze", str(vad), *AUDIO, "--input-value", "sr=16000")
    assert code == 0, err


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize(("rate", "samples"), [("16000", 256), ("8000", 128)])
def test_the_branch_taken_compiles_to_c_that_matches_onnxruntime(vad: Path, rate: str,
                                                                 samples: int, run_cli) -> None:
    """Either rate folds to its own branch (8 kHz: the window fits 128 samples), and the C,
    LSTM included, matches onnxruntime fed the same sr."""
    code, out, err = run_cli("validate", str(vad), "--backend", "c", "--target", "x86-host",
                             "--input-shape", f"x=1x{samples}", "--input-value", f"sr={rate}")
    assert code == 0, err + out
    assert "result: match" in out


def test_the_reference_is_fed_the_bound_value(vad: Path) -> None:
    """A different sr fed to the reference would take the other branch: the C would not match."""
    from opfuse.measure.validate.c_float import reference

    result = api.compile(vad, "x86-host", ["x=1x256"], input_value=["sr=16000"])
    feeds, _, _ = reference(result.source, None, 0, result.input_shapes, result.input_values)
    assert feeds["sr"] == 16000 and feeds["sr"].dtype == np.int64


@pytest.mark.parametrize(("value", "says"), [
    ("rate=16000", "'rate', which is not a graph input"),
    ("sr=16k", "'16k' is not a valid int64 value"),
    ("sr=8000,16000", "2 value(s) given, the input is a scalar"),
    ("sr=99999999999999999999", "does not fit int64"),
    ("sr", "expected NAME=VALUE"),
    ("h=1,2", "2 value(s) given, the input is shape [1, 1, 8]"),
    ("h=nan,0,0,0,0,0,0,0", "'nan' is not a finite number"),
])
@pytest.mark.parametrize("command", ["analyze", "compile", "validate", "fusion"])
def test_a_bad_input_value_is_one_line_naming_it(vad: Path, tmp_path: Path, run_cli, command: str,
                                                 value: str, says: str) -> None:
    out_path = tmp_path / "never.onnx"
    extra = {"compile": ["-o", str(out_path)], "validate": ["--backend", "c"]}.get(command, [])
    code, out, err = run_cli(command, str(vad), *extra, *AUDIO, "--input-value", value)
    assert code == 2, err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out_path.exists()


def test_sweep_binds_the_value_in_every_model(vad: Path, tmp_path: Path, run_cli) -> None:
    rows = tmp_path / "rows.json"
    code, out, err = run_cli("sweep", str(vad), "--targets", "x86-host", "--precisions", "fp32",
                             "-o", str(rows), "--quiet", *AUDIO, "--input-value", "sr=16000")
    assert code == 0, err
    import json

    [row] = json.loads(rows.read_text())
    assert row["status"] == "ok", row
    assert "input_value=sr=16000" in row["options"]
    code, out, err = run_cli("sweep", str(vad), "--targets", "x86-host", "-o", str(rows),
                             "--input-value", "sr")
    assert code == 2 and "expected NAME=VALUE" in err


def test_an_if_whose_branches_agree_stays_an_opaque_op(tmp_path: Path, run_cli) -> None:
    """Branches with the same output shapes: the If imports as an opaque op with those shapes,
    blocks fusion with the opaque_op reason, and the written ONNX still runs in onnxruntime."""
    path = tmp_path / "agree.onnx"
    onnx.save(silero_like(samples_8k=None, conv_8k=(32, 16)), path)
    result = api.compile(path, "x86-host", ["x=1x256"])
    [node] = [n for n in result.optimized.graph if n.op_type == "If"]
    assert tuple(node.outputs[0].shape) == (1, 8, 15)
    reasons = {d.reason for d in result.partition.decisions if "rate_switch" in
               (d.producer, d.consumer)}
    assert reasons == {"opaque_op"}
    # the audio is read inside the branches only: still an input of the If's kernel, so the
    # arena keeps it until the If runs
    [kernel] = [k for k in result.partition.kernels if "rate_switch" in k.nodes]
    assert "x" in kernel.inputs
    plan = result.schedule().plan
    step = result.partition.kernels.index(kernel)
    assert any(t.name == "x" and t.live_at(step) for t in plan.tensors)
    code, out, err = run_cli("compile", str(path), "-o", str(tmp_path / "o.onnx"), *AUDIO,
                             "--check")
    assert code == 0 and "result: match" in out, err + out
    code, out, err = run_cli("analyze", str(path), *AUDIO)
    assert code == 0, err


def test_an_if_whose_branches_disagree_names_the_input(tmp_path: Path, run_cli) -> None:
    path = tmp_path / "disagree.onnx"
    onnx.save(silero_like(samples_8k=None), path)  # 16 kHz: 15 frames, 8 kHz: 31
    code, _, err = run_cli("analyze", str(path), *AUDIO)
    assert code == 2
    assert "different output shapes" in err and "--input-value sr=" in err


def test_validate_two_models_feeds_the_bound_value_to_the_original(vad: Path, tmp_path: Path,
                                                                   run_cli) -> None:
    optimized = tmp_path / "opt.onnx"
    code, _, err = run_cli("compile", str(vad), "-o", str(optimized), *AUDIO,
                           "--input-value", "sr=16000")
    assert code == 0, err
    code, out, err = run_cli("validate", str(vad), str(optimized), *AUDIO,
                             "--input-value", "sr=16000")
    assert code == 0 and "result: match" in out, err + out



def _two_ifs() -> onnx.ModelProto:
    """Two Ifs on sr whose branches each define a value 'tmp' (legal: sibling scopes)."""
    from onnx import TensorProto, helper

    def branch(op: str, out: str) -> onnx.GraphProto:
        nodes = [helper.make_node(op, ["x"], ["tmp"]), helper.make_node("Neg", ["tmp"], [out])]
        return helper.make_graph(nodes, f"{op}_{out}", [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4])])

    nodes = [helper.make_node("Constant", [], ["k"], value=helper.make_tensor(
                 "k", TensorProto.INT64, [], [16000])),
             helper.make_node("Equal", ["sr", "k"], ["c"])]
    for i in (1, 2):
        nodes.append(helper.make_node("If", ["c"], [f"y{i}"],
                                      then_branch=branch("Relu", f"t{i}"),
                                      else_branch=branch("Abs", f"e{i}")))
    graph = helper.make_graph(
        nodes, "two_ifs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 4]) for i in (1, 2)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


@pytest.mark.parametrize("bind", [("--input-value", "sr=16000"), ("--input-value", "sr=8000"), ()])
def test_two_inlined_branches_keep_their_values_apart(tmp_path: Path, run_cli, bind) -> None:
    path = tmp_path / "two.onnx"
    onnx.save(_two_ifs(), path)
    code, out, err = run_cli("compile", str(path), "-o", str(tmp_path / "o.onnx"), *bind,
                             "--check")
    assert code == 0 and "result: match" in out, err + out
    ops = [n.op_type for n in onnx.load(tmp_path / "o.onnx").graph.node]
    assert ("If" in ops) == (not bind)


@pytest.mark.skipif(any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi and qemu-system-arm")
def test_the_vad_runs_on_cortex_m7_under_qemu(vad: Path, run_cli) -> None:
    code, out, err = run_cli("validate", str(vad), "--backend", "c", "--target", "cortex-m7",
                             "--emulate", *AUDIO, "--input-value", "sr=16000")
    assert code == 0 and "result: match" in out, err + out



def _if_on(cond_nodes: list, cond: str, out: str) -> list:
    from onnx import TensorProto, helper

    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], [f"{out}_{op}"])], f"{out}_{op}", [],
                                 [helper.make_tensor_value_info(f"{out}_{op}", TensorProto.FLOAT,
                                                                [1, 4])])

    return [*cond_nodes, helper.make_node("If", [cond], [out], then_branch=branch("Relu"),
                                          else_branch=branch("Neg"))]


def test_a_condition_built_large_is_not_evaluated_at_import() -> None:
    """Conditions that would grow past the small limit (a 2^28-element fill, a broadcast of two
    4096 vectors to 16M) are left to the runtime: nothing of that size is built at import, while
    the If on a small comparison folds."""
    import tracemalloc

    from onnx import TensorProto, helper

    from opfuse.frontends.if_fold import fold_constant_ifs

    def init(name: str, arr: np.ndarray) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(arr, name)

    one = helper.make_tensor("one", TensorProto.BOOL, [1], [True])
    nodes = [
        *_if_on([helper.make_node("ConstantOfShape", ["big"], ["fill"], value=one),
                 helper.make_node("ReduceMin", ["fill"], ["c1"], keepdims=0)], "c1", "y1"),
        *_if_on([helper.make_node("Equal", ["a", "b"], ["outer"]),
                 helper.make_node("ReduceMin", ["outer"], ["c2"], keepdims=0)], "c2", "y2"),
        *_if_on([helper.make_node("Equal", ["sr", "k"], ["c3"])], "c3", "y3"),
    ]
    inits = [init("big", np.array([1 << 28], np.int64)), init("a", np.zeros(4096, np.float32)),
             init("b", np.zeros((4096, 1), np.float32)), init("sr", np.array(16000)),
             init("k", np.array(16000))]
    graph = helper.make_graph(
        nodes, "large", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 4]) for i in (1, 2, 3)],
        inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    tracemalloc.start()
    try:
        folded, count = fold_constant_ifs(proto, "large.onnx")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak  # the fill alone is 256 MiB, the broadcast 16 MiB
    assert count == 1
    assert [n.op_type for n in folded.graph.node].count("If") == 2


def test_nested_shape_conditioned_ifs_fold_at_any_depth(vad: Path) -> None:
    """Each front end ends in Ifs on shape arithmetic nested three deep (Shape -> Gather ->
    Equal, Size -> Equal -> Not -> Cast, as silero v6's decoder): with the shapes and sr bound
    every one folds, so no If is left in the imported graph at any depth."""
    result = api.compile(vad, "x86-host", ["x=1x256"], input_value=["sr=16000"])
    ops = {n.op_type for n in result.optimized.graph}
    assert "If" not in ops and "Shape" not in ops and "Size" not in ops
    assert "LSTM" in ops


def test_an_if_on_shapes_the_model_cannot_take_is_one_line(vad: Path, run_cli) -> None:
    """At 8 kHz the window is sized for 128 samples: 256 do not fit, so onnxruntime fails too,
    and the shape-conditioned Ifs behind it cannot settle: one line that blames the bound shape,
    not a value to bind."""
    sess = ort.InferenceSession(str(vad), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception):  # noqa: B017 (onnxruntime's own error types)
        sess.run(None, {"x": np.zeros((1, 256), np.float32), "h": np.zeros((1, 1, 8), np.float32),
                        "c": np.zeros((1, 1, 8), np.float32), "sr": np.array(8000)})
    code, out, err = run_cli("analyze", str(vad), *AUDIO, "--input-value", "sr=8000")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "reads the shapes of 'x'" in err and "--input-value" not in err
    assert "If node 'stft8k_sw/squeeze_if'" in err  # its own name, not prefixed by the folder
