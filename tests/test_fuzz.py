"""The mutation fuzzer in CI (issue 9 item 7, issue 18 item 4): seeded cases over real ONNX and
TFLite models, each running `opfuse compile`, `analyze --json --html`, `compile --emit c` and, on
small models, `validate --backend c` in a forked child with a timeout. Every case must end with
exit 0, 1 or 2 and one line: no traceback, no hang, no crash, no half-written output. Every case a
long run of benchmarks/fuzz.py found is kept under tests/data/fuzz/ and replayed here."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from benchmarks.fuzz import BAD, GOOD, fuzz, mutate, run_case, seed_protos
from benchmarks.fuzz_flatbuffers import find_sites, mutate_tflite
from benchmarks.fuzz_seeds import builtin_tflite, load_case

# per format, about a minute each unloaded (an ONNX case costs more: compiles of the full-size
# shared nets); OPFUSE_FUZZ_CASES sets both
CASES = {fmt: int(os.environ.get("OPFUSE_FUZZ_CASES", n)) for fmt, n in (("onnx", 80), ("tflite", 120))}
FOUND = Path(__file__).parent / "data" / "fuzz"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin",
                                reason="the fuzzer isolates cases with fork()")


def _record(bad: list[str]):
    def record(i: int, name: str, what: str, outcome) -> None:  # noqa: ANN001
        if outcome.kind in BAD:
            bad.append(f"case {i} [{name}] {what}: {outcome.kind}: {outcome.detail[-300:]}")

    return record


@pytest.mark.parametrize("fmt", ["onnx", "tflite"])
def test_fuzz_cases_end_cleanly(fmt: str) -> None:
    bad: list[str] = []
    cases = CASES[fmt]
    counts = fuzz(cases, seed=0, timeout=60.0, on_case=_record(bad), fmt=fmt)
    assert sum(counts.values()) == cases
    assert not bad, "\n".join(bad[:10])
    # the mutations must reach past the parser: some cases compile (fewer with the built-in seed
    # alone, when ../shared is absent), more are refused
    assert counts["ok"] + counts["exit1"] >= cases // 40 and counts["rejected"] > cases // 4, counts
    assert set(counts) <= set(GOOD)


def _found() -> list[Path]:
    return sorted(p for p in FOUND.iterdir() if p.is_file())


@pytest.mark.parametrize("path", _found(), ids=lambda p: p.name.split(".")[0])
def test_cases_the_long_runs_found_end_cleanly(path: Path, tmp_path: Path) -> None:
    """Each case a long run found (a traceback before its fix), replayed through every command."""
    case = load_case(path)
    if case is None:
        pytest.skip("../shared/models not present (the case patches a shared model)")
    data, suffix = case
    outcome = run_case(data, tmp_path, timeout=60.0, suffix=suffix)
    assert outcome.kind in GOOD, outcome.detail


def test_the_fuzzer_sees_a_traceback(monkeypatch, tmp_path) -> None:
    """The classifier can fail: an escaped exception in the pipeline is reported as such."""
    import opfuse.api  # before patching: its import binds pipeline.compile_model
    import opfuse.pipeline

    def boom(*args, **kwargs):  # noqa: ANN002, ANN003
        raise KeyError("planted")

    monkeypatch.setattr(opfuse.pipeline, "compile_model", boom)
    monkeypatch.setattr(opfuse.api, "compile_model", boom)
    seeds = seed_protos(("seed_block",))
    outcome = run_case(seeds["seed_block"], tmp_path, timeout=60.0)
    assert outcome.kind == "traceback" and "planted" in outcome.detail


def test_the_fuzzer_sees_a_half_written_output(monkeypatch, tmp_path) -> None:
    """An output left behind by a failing command is reported, not counted as a rejection."""
    import opfuse.api
    from opfuse.errors import OpfuseError

    def write_then_fail(result, folder, **kwargs):  # noqa: ANN001, ANN003
        Path(folder).mkdir()
        (Path(folder) / "model.c").write_text("/* half */")
        raise OpfuseError("planted")

    monkeypatch.setattr(opfuse.api, "emit_c", write_then_fail)
    outcome = run_case(seed_protos(("seed_block",))["seed_block"], tmp_path, timeout=60.0)
    assert outcome.kind == "half_written", outcome


def test_mutations_are_seeded() -> None:
    data = seed_protos(("paddle_style",))["paddle_style"]
    a = [mutate(data, random.Random(i)) for i in range(20)]
    b = [mutate(data, random.Random(i)) for i in range(20)]
    assert a == b and len({m for m, _ in a}) > 15
    flat = builtin_tflite()
    c = [mutate_tflite(flat, random.Random(i)) for i in range(20)]
    d = [mutate_tflite(flat, random.Random(i)) for i in range(20)]
    assert c == d and len({m for m, _ in c}) > 15


def test_flatbuffer_sites_are_the_schema_s() -> None:
    """The mutation sites are found through the schema: every operator's inputs and outputs are
    index sites, and every quantized tensor's scales are scale sites."""
    import struct

    import tflite

    data = builtin_tflite()
    sites = find_sites(data)
    graph = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
    scales = sum(graph.Tensors(i).Quantization().ScaleLength() for i in range(graph.TensorsLength())
                 if graph.Tensors(i).Quantization() is not None)
    assert len(sites.scales) == scales > 0
    indices = {struct.unpack_from("<i", data, p)[0] for p in sites.indices}
    for k in range(graph.OperatorsLength()):
        assert set(graph.Operators(k).InputsAsNumpy()) - {-1} <= indices
    assert sites.options and sites.tables and sites.vectors


@pytest.mark.parametrize("fmt", ["onnx", "tflite"])
def test_shared_constants_end_cleanly(fmt: str, tmp_path: Path) -> None:
    """The shared-buffer mutation kinds (issue 31), each applied alone to a seed: ONNX
    initializers on one external region of the case's own file, .tflite tensors reading one
    buffer and tensors-vector entries naming one tensor. Each case is rejected, ok or
    unsupported, and the mutation did share: the region or buffer is named more than once."""
    import onnx
    import tflite

    from benchmarks.fuzz_flatbuffers import repeat_tensor, share_buffer
    from benchmarks.fuzz_mutations import shared_external

    outcomes = []
    for i in range(6):
        rng = random.Random(i)
        if fmt == "onnx":
            proto = onnx.ModelProto.FromString(seed_protos(("seed_block",))["seed_block"])
            what = shared_external(proto, rng)
            data = proto.SerializeToString()
            shared = [t for t in proto.graph.initializer if t.external_data]
        else:
            buf = bytearray(builtin_tflite())
            what = (share_buffer if i % 2 else repeat_tensor)(buf, find_sites(bytes(buf)), rng)
            data = bytes(buf)
            graph = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
            shared = [graph.Tensors(k).Buffer() for k in range(graph.TensorsLength())]
            shared = [b for b in shared if b > 0 and shared.count(b) > 1]
        assert len(shared) > 1, what
        outcome = run_case(data, tmp_path, timeout=60.0, suffix=f".{fmt}")
        assert outcome.kind in GOOD, (what, outcome)
        outcomes.append(outcome.kind)
    assert "ok" in outcomes or fmt == "tflite", outcomes  # ONNX: the region is valid floats
