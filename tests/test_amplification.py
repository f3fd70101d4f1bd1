"""Amplification before any limit (issue 31): N ONNX initializers naming one external region, N
.tflite tensors reading one buffer, and a few-hundred-byte model folding into megabytes of
constants are held to the `weights` and `expansion` limits before the data is made; a model past
protobuf's 2 GiB is inferred without its large weights (opfuse/frontends/large_proto.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.frontends.limits import Limits, MiB
from tests.helpers.cli import assert_clean_error

ROOT = Path(__file__).resolve().parents[1]
REGION = 1 << 20  # one 1 MiB region (or buffer) every constant of the models below reads
N = 24  # constants sharing it: 24 MiB materialized from a 1 MiB file
_PEAK = ("import resource, subprocess, sys\n"
         "code = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
         "sys.stderr.write(code.stderr)\n"
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
         "sys.exit(code.returncode)")


def _opfuse_peak(*args: str) -> tuple[int, str, int]:
    """`python -m opfuse ARGS` in a fresh parent: exit code, stderr and its peak RSS in bytes."""
    proc = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "opfuse", *args],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc.returncode, proc.stderr, int(proc.stdout.split()[-1])


def _add_chain(consts: list[str], width: int) -> tuple[list, list]:
    nodes, prev = [], "x"
    for i, name in enumerate(consts):
        nodes.append(helper.make_node("Add", [prev, name], [f"y{i}"], name=f"add{i}"))
        prev = f"y{i}"
    return nodes, [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, width])]


def _shared_external(folder: Path, n: int) -> Path:
    """``n`` initializers [1, 262144] float, each the whole of one 1 MiB file."""
    (folder / "w.bin").write_bytes(np.full(REGION // 4, 0.25, np.float32).tobytes())
    inits = []
    for i in range(n):
        t = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[1, REGION // 4],
                        data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(REGION))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        inits.append(t)
    nodes, outputs = _add_chain([t.name for t in inits], REGION // 4)
    graph = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, REGION // 4])], outputs, inits)
    path = folder / "shared.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _shared_buffer(folder: Path, n: int) -> Path:
    """``n`` .tflite constants [1, 262144] float reading one 1 MiB buffer, added in a chain."""
    from tests.helpers.tflite_builder import TfliteBuilder

    b = TfliteBuilder()
    width = REGION // 4
    prev = b.input("x", (1, width), np.float32)
    first = b.const("w0", np.full((1, width), 0.25, np.float32))
    for i in range(n):
        w = first if i == 0 else b.tensor(f"w{i}", (1, width), np.float32, shares=first)
        y = b.tensor(f"y{i}", (1, width), np.float32)
        b.op("ADD", [prev, w], [y], "AddOptions")
        prev = y
    b.output(prev)
    path = folder / "shared.tflite"
    path.write_bytes(b.build())
    return path


@pytest.mark.parametrize("build", [_shared_external, _shared_buffer], ids=["onnx", "tflite"])
def test_constants_sharing_one_region_are_counted_once_per_reference(build, tmp_path: Path) -> None:
    """24 constants reading one 1 MiB region are 24 MiB in memory: over a 16 MiB weights limit
    that is one line and exit 2 from the metadata, with the peak RSS of a process that read
    nothing; under a 32 MiB one the model analyzes (the sharing itself is legitimate)."""
    path = build(tmp_path, N)
    assert path.stat().st_size < 2 * REGION
    code, err, refused_peak = _opfuse_peak("analyze", str(path), "--limit", "weights=16MiB")
    assert_clean_error(code, err, path.name, "one copy per tensor", "weights limit of 16.0 MiB",
                       "--limit weights=")
    code, err, peak = _opfuse_peak("analyze", str(path), "--limit", "weights=32MiB",
                                   "--json", str(tmp_path / "a.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "a.json").read_text())["before"]["kernels"] == N
    assert refused_peak + 2 * N * MiB < peak, (refused_peak, peak)  # refused before reading


def test_the_default_weights_limit_refuses_2000_shared_regions(tmp_path: Path) -> None:
    """The issue's case: 2000 initializers on one 1 MiB region were 5.3 GB of RSS and then a
    protobuf EncodeError; under the default limit (256 MiB) it is one line within 1 GiB."""
    assert Limits().weights == 256 * MiB
    path = _shared_external(tmp_path, 2000)
    code, err, peak = _opfuse_peak("analyze", str(path))
    assert_clean_error(code, err, "shared.onnx", "external data of 257 tensors", "weights limit")
    assert peak < 1 << 30, peak


def _fill(elements: int, hidden: bool) -> onnx.ModelProto:
    """A ConstantOfShape of ``elements`` floats added to the input: ~150 bytes. ``hidden``: its
    shape passes through Abs, which inference does not propagate (the folder's guard sizes it)."""
    shape = numpy_helper.from_array(np.array([1, elements], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape_abs" if hidden else "shape"], ["c"],
                              name="fill", value=helper.make_tensor("v", TensorProto.FLOAT, [1],
                                                                    [0.5])),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    if hidden:
        nodes.insert(0, helper.make_node("Abs", ["shape"], ["shape_abs"], name="abs"))
    graph = helper.make_graph(nodes, "fill", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, elements])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, elements])], [shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("hidden", [False, True], ids=["inferred", "hidden"])
def test_folded_constants_are_bounded_by_the_models_size(run_cli, tmp_path: Path,
                                                         hidden: bool) -> None:
    """A ~180-byte model folding 8 MB of constants (it wrote a 400 MB weights.c at 100M floats):
    over 4096 times its size (a model under 1 KiB counts as 1 KiB) it is one line, nothing
    written; `--limit expansion=N` lets it through."""
    path = tmp_path / "fill.onnx"
    onnx.save(_fill(2_000_000, hidden), path)
    assert path.stat().st_size < 300
    out = tmp_path / "c"
    code, _, err = run_cli("compile", str(path), "--emit", "c", "-o", str(out))
    assert_clean_error(code, err, "fill.onnx", "node 'fill'" if hidden else "'fill'",
                       "expansion limit of 4096x", "--limit expansion=N")
    assert not out.exists()
    code, _, err = run_cli("compile", str(path), "--limit", "expansion=100000", "-o",
                           str(tmp_path / "o.onnx"))
    assert code == 0, err
    code, _, err = run_cli("compile", str(path), "-o", str(tmp_path / "small.onnx"))
    assert code == 2
    onnx.save(_fill(1_000_000, hidden), path)  # 4 MB: within 4096 x 1 KiB
    code, _, err = run_cli("compile", str(path), "-o", str(tmp_path / "small.onnx"))
    assert code == 0, err


def test_a_model_past_protobufs_2_gib_is_inferred_without_its_large_weights(monkeypatch) -> None:
    """onnx's shape inference serializes the model; past 2 GiB that raised EncodeError. With the
    threshold lowered to 256 KiB, no proto over it reaches onnx's inference, a Reshape's small
    shape constant is still read, and the imported weights are the model's."""
    import onnx.shape_inference

    from opfuse.frontends import import_proto, large_proto

    limit = 256 << 10
    monkeypatch.setattr(large_proto, "PROTO_LIMIT", limit)
    real = onnx.shape_inference.infer_shapes
    sizes = []

    def infer(proto, *args, **kwargs):
        sizes.append(proto.ByteSize())
        return real(proto, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", infer)
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 2048)).astype(np.float32)  # 512 KiB
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Reshape", ["m", "shape"], ["y"], name="reshape")], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"),
         numpy_helper.from_array(np.array([2, 32, 32], np.int64), "shape")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert proto.ByteSize() > limit
    model = import_proto(proto, "big.onnx")
    assert sizes and max(sizes) <= limit, sizes
    assert list(model.graph.outputs[0].shape) == [2, 32, 32]
    np.testing.assert_array_equal(model.graph.initializers["w"].const_value.numpy(), weight)
    assert numpy_helper.to_array(proto.graph.initializer[0]).tobytes() == weight.tobytes()


def test_a_step_that_must_serialize_a_model_past_2_gib_is_one_line(run_cli, monkeypatch,
                                                                   tmp_path: Path) -> None:
    """Past import, a step that writes the whole proto (onnxruntime's session, `compile -o`)
    meets protobuf's EncodeError: one line and exit 2, not a traceback."""
    from google.protobuf.message import EncodeError

    import opfuse.api

    def too_large(*args, **kwargs):  # noqa: ANN002, ANN003
        raise EncodeError("Failed to serialize proto")

    monkeypatch.setattr(opfuse.api, "compile_model", too_large)
    code, _, err = run_cli("compile", "ds_cnn", "-o", str(tmp_path / "o.onnx"))
    assert_clean_error(code, err, "protobuf's 2 GiB")
    assert not (tmp_path / "o.onnx").exists()


def _tflite_folds(folder: Path, kind: str) -> Path:
    """A .tflite whose constants fold at import into far more than the file: ``broadcast``, a
    [1024, 1] + [1, 1024] ADD of two constants (4 MiB from 8 KiB); ``concat``, a CONCATENATION
    of 200 references to one [1, 1024] constant (800 KiB from ~5 KiB)."""
    from tests.helpers.tflite_builder import TfliteBuilder

    b = TfliteBuilder()
    if kind == "broadcast":
        a = b.const("a", np.ones((1024, 1), np.float32))
        c = b.const("c", np.ones((1, 1024), np.float32))
        folded = b.tensor("folded", (1024, 1024), np.float32)
        b.op("ADD", [a, c], [folded], "AddOptions")
        shape = (1024, 1024)
    else:
        row = b.const("row", np.ones((1, 1024), np.float32))
        folded = b.tensor("folded", (200, 1024), np.float32)
        b.op("CONCATENATION", [row] * 200, [folded], "ConcatenationOptions", Axis=0)
        shape = (200, 1024)
    x = b.input("x", shape, np.float32)
    y = b.tensor("y", shape, np.float32)
    b.op("ADD", [x, folded], [y], "AddOptions")
    b.output(y)
    path = folder / f"{kind}.tflite"
    path.write_bytes(b.build())
    return path


@pytest.mark.parametrize(("kind", "limit", "message"),
                         [("broadcast", "constant=1MiB", "constant limit of 1.0 MiB"),
                          ("concat", "expansion=50", "expansion limit of 50x")])
def test_tflite_folds_are_sized_before_they_are_evaluated(run_cli, tmp_path: Path, kind: str,
                                                          limit: str, message: str) -> None:
    """The TFLite frontend folds constant ops itself (before the ONNX import's checks): each fold
    is sized from its inputs before numpy evaluates it, against the constant limit and, with all
    folds so far, against `expansion` times the file. Under the defaults both models compile."""
    path = _tflite_folds(tmp_path, kind)
    code, _, err = run_cli("analyze", str(path), "--limit", limit)
    assert_clean_error(code, err, path.name, "operator 0", "folds into constant", message)
    code, _, err = run_cli("analyze", str(path))
    assert code == 0, err


def test_validate_holds_both_models_external_data_to_the_weights_limit(run_cli,
                                                                       tmp_path: Path) -> None:
    """`validate A B` hands both files to onnxruntime, which reads each initializer's region
    itself: the weights limit is checked on both from the metadata first."""
    path = _shared_external(tmp_path, N)
    code, _, err = run_cli("validate", "ds_cnn", str(path), "--limit", "weights=16MiB")
    assert_clean_error(code, err, "shared.onnx", "weights limit of 16.0 MiB")
