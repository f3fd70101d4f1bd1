"""What analyze reports is what ``--emit c`` writes: one partition, one plan (issue 19,
docs/architecture.md "One partition, one plan").

For every built-in and shared model and every target (each has a C backend), by default and with
cascades off: analyze's kernels (names, nodes, cascade members), its ring buffers and its peak arena
are those of the schedule the C emitter consumes, and (for a sample, with every target and both
modes on the small models) those the emitted ``model.json`` lists and ``model.h``'s
``OPFUSE_ARENA_BYTES`` states. The emitted files are the independent check: they are parsed back
from the text ``generate`` wrote, not read from the objects that wrote them.
"""

from __future__ import annotations

import json
import re

import pytest

from opfuse import models
from opfuse.analysis import analyze
from opfuse.backends.c.emit import c_schedule, generate
from opfuse.compiled import CompileResult
from opfuse.pipeline import compile_model
from opfuse.targets import list_targets
from tests.helpers.shared import SHARED_MODELS, shared_models

SHARED = [*shared_models("onnx"), *shared_models("tflite")]
SOURCES = [*models.MODELS, *(str(p) for p in SHARED)]
TARGETS = list_targets()
# emitting weights.c for these takes seconds each: emitted on one target, checked in memory on all
LARGE = {"resnet18", "seed_pipeline", "light_densenet121.onnx", "light_inception_v2.onnx",
         "light_resnet50.onnx", "light_shufflenet.onnx", "light_squeezenet.onnx", "mobilenet_v2"}


def _short(source: str) -> str:
    return source.rsplit("/", 1)[-1]


def _reported(result: CompileResult, cascades: bool) -> dict:
    """analyze's kernels and arena, as its JSON says them."""
    analysis = analyze(result, cascades=cascades)
    data = analysis.to_json()
    kernels = []
    for kernel in analysis.fusion["kernels"]:
        rings = [(r["value"], r["rows"], r["bytes"]) for r in kernel.get("ring_buffers", [])]
        kernels.append((kernel["name"], tuple(kernel["nodes"]), tuple(rings)))
    own = not data["precision_note"]  # a what-if precision re-sizes floats: no arena to compare
    return {"kernels": kernels, "arena": data["after"]["peak_arena_bytes"] if own else None,
            "members": [tuple(k.get("members", ())) for k in analysis.fusion["kernels"]]}


def _emitted(files: dict[str, str]) -> dict:
    """The kernels model.json lists and the arena model.h defines, parsed from the files."""
    info = json.loads(files["model.json"])
    header = files["model.h"]
    arena = int(re.search(r"#define \w+_ARENA_BYTES (\d+)", header).group(1))
    kernels = []
    for entry in sorted(info["kernel_outputs"], key=lambda e: e["index"]):
        rings = [(r["value"], r["rows"], r["bytes"]) for r in entry.get("ring_buffers", [])]
        kernels.append((entry["name"], tuple(entry["nodes"]), tuple(rings)))
    return {"kernels": kernels, "arena": arena,
            "members": [len(e.get("members", ())) for e in info["kernel_outputs"]]}


def _schedule(result: CompileResult, cascades: bool) -> dict:
    """The kernels and arena of the schedule the C emitter consumes (``emit.c_schedule``)."""
    sched = c_schedule(result, cascades=cascades)
    kernels = [(k.name, k.nodes, tuple((r.value, r.rows, r.nbytes) for r in k.ring_buffers))
               for k in sched.partition.kernels]
    return {"kernels": kernels, "arena": sched.plan.peak_bytes,
            "members": [tuple(m.name for m in k.members) for k in sched.partition.kernels]}


def _require_shared(source: str) -> None:
    if "/" in source and not SHARED_MODELS.is_dir():
        pytest.skip(f"../shared/models not present ({source})")


def _emitted_here(source: str, target: str) -> bool:
    """Whether the real files are emitted for this pair (every target for the small models, one
    for the large: their weights.c alone takes seconds to write)."""
    return _short(source) not in LARGE or target == "cortex-m7"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("source", SOURCES, ids=_short)
def test_analyze_reports_the_kernels_and_arena_the_c_is_emitted_with(source, target):
    _require_shared(source)
    result = compile_model(source, target)
    for cascades in (True, False):
        reported, consumed = _reported(result, cascades), _schedule(result, cascades)
        mode = "default" if cascades else "--no-cascades"
        assert reported["kernels"] == consumed["kernels"], mode
        assert reported["members"] == consumed["members"], mode
        if reported["arena"] is not None:
            assert reported["arena"] == consumed["arena"], mode
        if not cascades:
            assert not any(consumed["members"]), "--no-cascades left a cascade"
        if not _emitted_here(source, target) or (not cascades and _short(source) in LARGE):
            continue
        files, _, _ = generate(result, cascades=cascades)
        emitted = _emitted(files)
        assert emitted["kernels"] == reported["kernels"], mode
        assert emitted["members"] == [len(m) for m in reported["members"]], mode
        if reported["arena"] is not None:
            assert emitted["arena"] == reported["arena"], mode


def test_a_float_model_on_an_int8_target_says_analyze_costs_a_what_if():
    """ethos-u55 has no fp32 rate: analyze re-sizes floats (a what-if) and says so, while the C
    stores float32; the kernels are the same either way."""
    result = compile_model("ds_cnn", "ethos-u55")
    analysis = analyze(result)
    assert analysis.precision == "int8" and "what-if" in analysis.precision_note
    assert analysis.after.plan.peak_bytes < c_schedule(result).plan.peak_bytes
