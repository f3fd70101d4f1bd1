"""model.json's typed records (opfuse/backends/c/manifest.py): written in one place, read back to
the same records, and an older manifest (before ``prefix`` and ``kernel_outputs``) still reads."""

from __future__ import annotations

import json

import pytest

from opfuse.api import compile
from opfuse.backends.c.emit import generate
from opfuse.backends.c.manifest import Manifest, TensorRecord
from tests.helpers.shared import shared_model


@pytest.mark.parametrize("source", ["mobilenet_v2", "seed_block"])
def test_records_survive_their_json(source: str) -> None:
    files, info, plan = generate(compile(source))
    assert Manifest.from_json(json.loads(files["model.json"])) == info
    assert info.arena_bytes == plan.peak_bytes and info.kernels == len(info.kernel_outputs)
    assert all(k.index == i for i, k in enumerate(info.kernel_outputs))


def test_a_cascade_lists_its_members_and_rings() -> None:
    files, info, _ = generate(compile("mobilenet_v2"))
    cascades = [k for k in info.kernel_outputs if k.members is not None]
    assert cascades and [k.name for k in cascades] == list(info.cascades)
    raw = {k["index"]: k for k in json.loads(files["model.json"])["kernel_outputs"]}
    for k in cascades:
        assert raw[k.index]["members"] == [list(m) for m in k.members]
        assert [r["rows"] for r in raw[k.index]["ring_buffers"]] == [r.rows for r in k.ring_buffers]
    plain = next(k for k in info.kernel_outputs if k.members is None)
    assert "members" not in raw[plain.index]  # the format of a kernel outside a cascade


def test_an_int8_tensor_keeps_its_quantization() -> None:
    path = shared_model("tflite", "ad01_int8.tflite")
    files, info, _ = generate(compile(path, "cortex-m7"))
    (x,) = info.inputs
    data = json.loads(files["model.json"])
    raw = data["inputs"][0]
    assert x.ctype == raw["ctype"] == "int8_t" and x.scale == raw["scale"] > 0
    assert x.zero_point == raw["zero_point"] and x.size == raw["size"]
    assert info.quant == data["quant"] == {"rounding": "tflite"}
    assert Manifest.from_json(data) == info


def test_an_older_manifest_reads_with_defaults() -> None:
    data = {"source": "m.onnx", "target": "x86-host", "fused": True, "planner": "greedy",
            "kernels": 1, "arena_bytes": 64, "weights_bytes": 8,
            "inputs": [{"name": "x", "shape": [1, 4], "size": 4}],
            "outputs": [{"name": "y", "shape": [1, 4], "size": 4}], "files": ["model.c"]}
    info = Manifest.from_json(data)
    assert info.prefix == "opfuse" and info.kernel_outputs == () and info.stack_scratch_bytes == 0
    assert info.inputs == (TensorRecord("x", (1, 4), 4),) and info.inputs[0].ctype == "float"
    assert "ctype" not in info.inputs[0].to_json()  # float tensors are written as before
