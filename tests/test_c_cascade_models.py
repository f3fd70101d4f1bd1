"""Every shared ONNX model and every built-in with cascades, as cascaded C, against onnxruntime.

For each model: ``compile --emit c --cascades`` on x86-host streaming rows of every width (its
``cascade_min_width`` is a speed policy, tested on its own), and for the MobileNetV2s on
cortex-m7 too; built once as a debug library (the same -O3 -march=native code, plus a hook that
copies out every kernel output) and run on seeded random inputs. The graph's outputs are compared with
onnxruntime on the original model, and every kernel's output (each streamed cascade's included)
with onnxruntime on the canonicalized model, at the tolerance ``validate --backend c`` uses. The
kernel outputs matter: the shared ``light_*`` models have constant weights, so their softmax is
uniform whatever the convolutions compute, and only the intermediates show a wrong row.

The arena: ``OPFUSE_ARENA_BYTES`` is the memory plan of the partition the C runs. Every cascade of
these models streams (none is split back into its members), so it is analyze's cascaded peak.

One seed, one build per model and target; cortex-m7 only for the MobileNetV2s, where its cascades
differ from x86-host's (residual joins and cuts move with the target's RAM): about three minutes on
a 2-core machine, most of it gcc on light_densenet121.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from opfuse.analysis import analyze
from opfuse.backends.c.emit import c_schedule, emit_c
from opfuse.measure.validate.c_float import reference
from opfuse.measure.validate.ort import compare
from opfuse.measure.validate.per_kernel import dump_kernels
from opfuse.memory import plan_memory
from opfuse.pipeline import compile_model
from tests.helpers.cascade import streaming
from tests.helpers.cascade_exec import every_value
from tests.helpers.shared import SHARED_ABSENT, SHARED_ONNX

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

RTOL = ATOL = 1e-4  # validate --backend c's defaults
BUILTINS = ["mobilenet_v2", "resnet18", "ds_cnn", "seed_pipeline"]  # the built-ins with cascades
SHARED = [
    "Ultraface_version-RFB-320",
    "light_densenet121",
    "light_inception_v2",
    "light_resnet50",
    "light_shufflenet",
    "light_squeezenet",
    "mobilenet_v2_128_0.5",
]
# cortex-m7 as well (its residual joins and cuts differ) for the MobileNetV2s only: CI time
ON_M7 = {"mobilenet_v2", "mobilenet_v2_128_0.5"}
# the two slowest (75 s and 30 s of CI's 20 minutes): their cascaded C runs with
# OPFUSE_SLOW_TESTS=1; CI still builds their fused C against onnxruntime (test_c_backend.py)
SLOW = {"light_densenet121", "light_inception_v2"}


def _source(name: str) -> str:
    if name in BUILTINS:
        return name
    path = SHARED_ONNX / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(SHARED_ABSENT)
    return str(path)


def _shape(result) -> list:  # noqa: ANN001
    return [(k.nodes, k.band_rows, tuple((r.value, r.rows) for r in k.ring_buffers))
            for k in result.partition.cascades]  # fmt: skip


def test_the_list_covers_every_shared_model_with_cascades() -> None:
    if not SHARED_ONNX.is_dir():
        pytest.skip(SHARED_ABSENT)
    with_cascades = {p.stem for p in SHARED_ONNX.glob("*.onnx")
                     if compile_model(str(p), streaming()).partition.cascades}  # fmt: skip
    assert with_cascades == set(SHARED)


@pytest.mark.parametrize("target", ["x86-host", "cortex-m7"])
@pytest.mark.parametrize("name", [*SHARED, *BUILTINS])
def test_cascaded_c_matches_onnxruntime(name: str, target: str, tmp_path: Path) -> None:
    if target != "x86-host" and name not in ON_M7:
        pytest.skip(f"{name} is built once, on x86-host (CI time)")
    if name in SLOW and not os.environ.get("OPFUSE_SLOW_TESTS"):
        pytest.skip(f"{name}: cascaded C with OPFUSE_SLOW_TESTS=1 (CI time)")
    source = _source(name)
    result = compile_model(source, streaming() if target == "x86-host" else target)
    if target != "x86-host" and _shape(result) == _shape(compile_model(source, streaming())):
        pytest.skip(f"the same cascades as on x86-host ({name})")
    if target != "x86-host" and not result.partition.cascades:
        pytest.skip(f"no cascade lowers {name}'s arena on {target} (cascade_no_gain)")
    assert result.partition.cascades, name
    folder = tmp_path / "c"
    emitted = emit_c(result, folder, cascades=True)

    # every cascade of the partition streams (the partitioner asked the C which it can write)
    text = (folder / "model.c").read_text()
    # calls, not functions: cascades of the same code share one (backends/c/kernel_functions.py)
    streamed = len(re.findall(r"^    k\d+_cascade\w*\(", text, re.M))
    assert streamed == len(emitted.cascades) == len(result.partition.cascades)

    # the arena is the plan of what runs: analyze's cascaded peak, below layer by layer
    header = (folder / "model.h").read_text()
    arena = int(re.search(r"#define OPFUSE_ARENA_BYTES (\d+)", header).group(1))
    sched = c_schedule(result)
    model, part = sched.model, sched.partition
    assert arena == emitted.arena_bytes == plan_memory(model, part, emitted.planner).peak_bytes
    cascaded = analyze(result, precision="fp32").after.plan.peak_bytes
    layers = analyze(result, precision="fp32", cascades=False).after.plan.peak_bytes
    assert arena == cascaded <= layers

    # outputs against the original, every kernel output against the canonicalized model
    feeds, ref, _ = reference(source)
    got = dump_kernels(folder, feeds)
    every = every_value(result.optimized, feeds)
    for key, value in ref.items():
        mine = got[key] if key in got else _run_output(folder, feeds, key)
        check = compare(key, value, np.asarray(mine).reshape(value.shape), RTOL, ATOL)
        assert check.ok, check
    checked = 0
    for out_name, out in got.items():
        if out_name in every:
            r = np.asarray(every[out_name])
            check = compare(out_name, r, out.reshape(r.shape), RTOL, ATOL)
            assert check.ok, check
            checked += 1
    outputs = {o for k in part.cascades for o in k.outputs}
    assert outputs <= set(got) and checked >= len(outputs)


def _run_output(folder: Path, feeds: dict, name: str) -> np.ndarray:
    """A graph output that is no kernel's arena output (e.g. a reshaped alias): run the model."""
    from opfuse.measure.run.host import CModel

    return CModel(folder).run(feeds)[name]


def test_validate_backend_c_streams_cascades_unless_no_cascades(run_cli) -> None:  # noqa: ANN001
    """The label says what the C kept, read off the built C: seed_pipeline streams its one
    cascade by default (and with the --cascades alias), not with --no-cascades; ds_cnn's
    partition has none, so its default C says so (it once said "cascaded" all the same)."""
    code, out, err = run_cli("validate", "seed_pipeline", "--backend", "c")
    assert code == 0, out + err
    assert "generated float32 C (1 cascade)" in out
    code, out, err = run_cli("validate", "seed_pipeline", "--backend", "c", "--cascades")  # alias
    assert code == 0 and "generated float32 C (1 cascade)" in out
    code, out, err = run_cli("validate", "seed_pipeline", "--backend", "c", "--no-cascades")
    assert code == 0 and "generated float32 C (fused, no cascades)" in out
    code, out, err = run_cli("validate", "ds_cnn", "--backend", "c")
    assert code == 0 and "generated float32 C (fused, no cascades)" in out
    code, _, err = run_cli("validate", "ds_cnn", "ds_cnn", "--no-cascades")
    assert code == 2 and "--no-cascades" in err and "Traceback" not in err
