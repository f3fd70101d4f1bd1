"""Denial-of-service models end in one line and exit 2 within 1 GiB of memory and 10 s of CPU; the
named limits (opfuse/frontends/limits.py) move with --limit; window attributes are checked against
the shapes (opfuse/frontends/window_check.py; docs/architecture.md, "Outputs and limits")."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.errors import OpfuseError
from opfuse.frontends.limits import Limits, MiB, parse_limits
from tests.helpers.cli import assert_clean_error

ROOT = Path(__file__).resolve().parents[1]
MEMORY = 1 << 30
CPU_SECONDS = 10  # CPU, not wall clock: 7 engineers share 2 cores, and load stretches the wall


def _model(nodes, inputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info(nodes[-1].output[0],
                                                             TensorProto.FLOAT, None)],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _fill_bomb(elements: int) -> onnx.ModelProto:
    """A ConstantOfShape of ``elements`` floats added to a 1x1 input: a few hundred bytes."""
    shape = numpy_helper.from_array(np.array([1, elements], np.int64), "shape")
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    return _model([helper.make_node("ConstantOfShape", ["shape"], ["c"], name="fill", value=one),
                   helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])], [shape])


def _conv(**attrs) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    return _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])], [w])


def _huge_input(dims: list[int]) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)])


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def _run_bounded(*args: str) -> tuple[int, str, float]:
    """`python -m opfuse ARGS` under 1 GiB of address space and 10 s of CPU; its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "opfuse", *args], preexec_fn=_bounded,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.returncode, proc.stderr, cpu


DOS = {
    "constant-of-shape-bomb": (lambda: _fill_bomb(100_000_000), "node 'fill'", "constant limit"),
    "stride-2^63-1": (lambda: _conv(strides=[2**63 - 1, 1]), "node 'conv'", "strides"),
    "10^12-element-input": (lambda: _huge_input([1, 1000, 1000, 1000, 1000]), "input 'x'",
                            "activation limit"),
}


def _hidden_bomb() -> onnx.ModelProto:
    """The fill's shape passes through Abs, which ONNX data propagation does not follow: only the
    folder's own guard sees the size, before it evaluates the fill."""
    bomb = _fill_bomb(100_000_000)
    bomb.graph.node.insert(0, helper.make_node("Abs", ["shape"], ["shape_abs"], name="abs"))
    bomb.graph.node[1].input[0] = "shape_abs"
    return bomb


@pytest.mark.parametrize("command", ["analyze", "compile"])
def test_a_fill_inference_cannot_size_is_refused_before_folding(tmp_path: Path,
                                                                command: str) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_hidden_bomb(), model)
    code, err, cpu = _run_bounded(command, str(model), *(("-o", str(tmp_path / "o.onnx"))
                                                          if command == "compile" else ()))
    assert_clean_error(code, err, "m.onnx", "node 'fill'", "constant limit")
    assert cpu < CPU_SECONDS


@pytest.mark.parametrize("command", ["analyze", "compile-c", "validate"])
@pytest.mark.parametrize("case", sorted(DOS))
def test_dos_models_end_in_one_line(tmp_path: Path, case: str, command: str) -> None:
    build, names, why = DOS[case]
    model = tmp_path / "m.onnx"
    onnx.save(build(), model)
    args = {"analyze": ("analyze", str(model)),
            "compile-c": ("compile", str(model), "--emit", "c", "-o", str(tmp_path / "c")),
            "validate": ("validate", str(model), str(model))}[command]
    code, err, cpu = _run_bounded(*args)
    assert_clean_error(code, err, names, why)
    assert cpu < CPU_SECONDS
    assert not (tmp_path / "c").exists()


def test_raising_the_constant_limit_lets_a_model_over_the_default_through(run_cli,
                                                                          tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_fill_bomb(257 * MiB // 4), model)  # 257 MiB of floats: 1 MiB over the default
    code, _, err = run_cli("fusion", str(model), "--json", str(tmp_path / "f.json"))
    assert_clean_error(code, err, "node 'fill'", "257.0 MiB", "--limit constant=")
    code, _, err = run_cli("fusion", str(model), "--limit", "constant=300MiB", "--json",
                           str(tmp_path / "f.json"))
    assert_clean_error(code, err, "node 'fill'", "expansion limit")  # 257 MiB from 150 bytes
    code, _, err = run_cli("fusion", str(model), "--limit", "constant=300MiB", "--limit",
                           "expansion=2000000", "--json", str(tmp_path / "f.json"))
    assert code == 0, err


def test_raising_the_activation_limit_lets_a_large_input_through(run_cli, tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_huge_input([1, (2 << 30) // 4 + 1]), model)  # 4 bytes over 2 GiB
    code, _, err = run_cli("fusion", str(model))
    assert_clean_error(code, err, "input 'x'", "activation limit")
    code, _, err = run_cli("fusion", str(model), "--limit", "activation=3GiB")
    assert code == 0, err


def test_the_limit_of_one_command_does_not_leak_into_the_next(run_cli, tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_huge_input([1, (2 << 30) // 4 + 1]), model)
    assert run_cli("fusion", str(model), "--limit", "activation=3GiB")[0] == 0
    assert run_cli("fusion", str(model))[0] == 2


def test_the_api_takes_limits(tmp_path: Path) -> None:
    import opfuse

    model = tmp_path / "m.onnx"
    onnx.save(_fill_bomb(1 << 20), model)  # 4 MiB
    with pytest.raises(OpfuseError, match="constant limit of 1.0 MiB"):
        opfuse.compile(model, limits=Limits(constant=1 * MiB))
    result = opfuse.compile(model, limits=Limits(constant=8 * MiB, constants_total=8 * MiB))
    assert result.original is not None  # the lazy re-import reads under the same limits
    with pytest.raises(OpfuseError, match="constants_total limit"):
        opfuse.compile(model, limits=Limits(constants_total=2 * MiB))


def test_limit_specs_parse_and_refuse_nonsense() -> None:
    assert parse_limits(["constant=512MiB", "extent=100"]) == Limits(constant=512 * MiB, extent=100)
    assert parse_limits(["activation=3gib"]).activation == 3 << 30
    for bad in ("constant", "speed=1MiB", "constant=lots", "extent=2MiB"):
        with pytest.raises(OpfuseError, match="--limit"):
            parse_limits([bad])


BAD_WINDOWS = {
    "stride-0": (dict(strides=[0, 1]), "strides [0, 1] must be >= 1"),
    "stride-over-extent": (dict(strides=[70000, 1]), "strides [70000, 1] is over the extent"),
    "dilation-over-input": (dict(dilations=[5, 1]), "kernel extent 11"),
    "negative-pad": (dict(pads=[-1, 0, 0, 0]), "pads [-1, 0, 0, 0] must be >= 0"),
    "pad-over-extent": (dict(pads=[1 << 20, 0, 0, 0]), "extent limit"),
    "group-mismatch": (dict(group=2), "group 2 does not fit 3 input channels"),
}


@pytest.mark.parametrize("case", sorted(BAD_WINDOWS))
def test_window_attributes_are_checked_against_the_shapes(run_cli, tmp_path: Path,
                                                          case: str) -> None:
    attrs, message = BAD_WINDOWS[case]
    model = tmp_path / "m.onnx"
    onnx.save(_conv(**attrs), model)
    code, _, err = run_cli("fusion", str(model))
    assert_clean_error(code, err, "m.onnx", "node 'conv' (Conv)", message)


def test_a_pool_kernel_larger_than_its_input_is_refused(run_cli, tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_model([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[9, 2])],
                     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]),
              model)
    code, _, err = run_cli("fusion", str(model))
    assert_clean_error(code, err, "node 'pool' (MaxPool)", "kernel extent 9")


def test_windows_at_the_edge_of_the_rules_still_compile(run_cli, tmp_path: Path) -> None:
    """A kernel exactly as wide as the padded input, and a stride past the input (one output
    element), are valid ONNX; so is a stride just under the extent limit."""
    for attrs in (dict(strides=[10, 8], pads=[1, 0, 1, 0], dilations=[4, 1]),
                  dict(strides=[9, 65536])):
        model = tmp_path / "m.onnx"
        onnx.save(_conv(**attrs), model)
        code, _, err = run_cli("fusion", str(model))
        assert code == 0, (attrs, err)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(("kernel", "pads", "strides"), [((2, 40), (0, 5, 1, 7), (1, 3)),
                                                         ((1, 33), (0, 0, 0, 0), (1, 1))])
def test_a_wide_pool_window_is_a_loop_not_an_unrolled_block_per_tap(op, kernel, pads, strides,
                                                                    tmp_path):
    """A MaxPool with a 4000-wide window unrolled into a 1.2 MB model.c (16000: gcc -O3 for over
    15 minutes); past UNROLLED_TAPS its taps are a run-time loop, and the C still matches."""
    from opfuse.backends.c.pools import UNROLLED_TAPS
    from opfuse.measure.validate.c_float import validate_c

    assert kernel[1] > UNROLLED_TAPS
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], kernel_shape=list(kernel), pads=list(pads),
                          strides=list(strides))], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 100])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "pool.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    report = validate_c(str(path), outdir=tmp_path / "c")
    assert report.ok, report
    assert (tmp_path / "c" / "model.c").stat().st_size < 40_000


def test_a_kernel_whose_stack_buffers_are_over_the_limit_is_one_line(run_cli, tmp_path):
    """A MaxPool over one 4M-wide row declared a 16 MiB row buffer on the stack and validate died
    of SIGSEGV in-process; the C backend refuses it under the stack limit."""
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 2])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 1 << 22])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "row.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code, _, err = run_cli("compile", str(path), "--emit", "c", "-o", str(tmp_path / "c"))
    assert_clean_error(code, err, "kernel 0 (MaxPool)", "stack limit", "--limit stack=")
    assert not (tmp_path / "c").exists()


def _many_outputs(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], [f"y{i}"]) for i in range(n)]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 4]) for i in range(n)]
    graph = helper.make_graph(nodes, "outs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_with_more_graph_outputs_than_the_limit_is_one_line(run_cli, tmp_path: Path) -> None:
    """Every graph output is live to the end, so the planner's overlaps grow with their square
    (10,000: 127 s, 1.1 GB): over the outputs limit, one line before any planning; raised, it runs."""
    path = tmp_path / "outs.onnx"
    onnx.save(_many_outputs(40), path)
    code, _, err = run_cli("analyze", str(path), "--limit", "outputs=32")
    assert_clean_error(code, err, "40", "outputs limit of 32", "--limit outputs=N")
    code, _, err = run_cli("analyze", str(path), "--limit", "outputs=40")
    assert code == 0, err
    assert Limits().outputs == 4096
    with pytest.raises(OpfuseError, match="counts"):
        parse_limits(["outputs=4KiB"])


def test_an_npz_is_bounded_before_it_is_decompressed(tmp_path: Path) -> None:
    """A compressed .npz declares its members' sizes in its zip directory: each member and their
    sum are held to the activation limit before any is read (a few MB can declare GBs)."""
    from opfuse.frontends.arrays import read_npz
    from opfuse.frontends.limits import using_limits

    path = tmp_path / "zeros.npz"
    np.savez_compressed(path, x=np.zeros((1, 1 << 19), np.float32), y=np.zeros(1 << 17, np.float32))
    assert path.stat().st_size < 64 * 1024  # 2.5 MiB of zeros, compressed
    with using_limits(Limits(activation=1 * MiB)), pytest.raises(OpfuseError, match="member 'x.npy'"):
        read_npz(path)
    with using_limits(Limits(activation=2 * MiB + 1024)), pytest.raises(OpfuseError, match="all members"):
        read_npz(path)
    assert read_npz(path)["x"].shape == (1, 1 << 19)
    (tmp_path / "bad.npz").write_bytes(b"PK not a zip")
    with pytest.raises(OpfuseError, match="not a readable .npz"):
        read_npz(tmp_path / "bad.npz")
