"""Cascaded C checked against onnxruntime (float) and TFLite Micro (int8, bit for bit), and the
arena it declares (tests/test_c_cascade*.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from opfuse.api import compile
from opfuse.backends.c import emit_c
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.c_float import reference
from opfuse.measure.validate.tflite_reference import TfliteReference
from tests.helpers.cascade import streaming, with_caps


def host(name: str):  # noqa: ANN201
    """x86-host for ``name``; the small test chains stream even their short rows (x86-host's
    cascade_min_width keeps rows under 56 columns whole: a speed policy, not a C limit)."""
    return "x86-host" if name == "mobilenet_v2" else with_caps("x86-host", cascade_min_width=0,
                                                                cascade_same_arena=True)


def arena_of(folder: Path) -> int:
    header = (folder / "model.h").read_text()
    return int(re.search(r"#define OPFUSE_ARENA_BYTES (\d+)", header).group(1))


def check_against_onnxruntime(source, folder: Path) -> None:  # noqa: ANN001
    feeds, ref, _ = reference(source)
    got = CModel(folder).run(feeds)
    for key, value in ref.items():
        assert float(np.abs(got[key] - value).max()) <= 1e-4 * float(np.abs(value).max()) + 1e-6


SEEDS = range(3)


def run_cascaded(path: Path, folder: Path, target=None):  # noqa: ANN001
    result = compile(path, target or streaming())
    assert result.partition.cascades, f"{path.name}: no cascade formed on {target}"
    emitted = emit_c(result, folder, cascades=True)
    assert emitted.cascades == tuple(k.name for k in result.partition.cascades)
    return result, emitted


def bit_exact(path: Path, folder: Path) -> None:
    build_shared(folder)
    model = CModel(folder)
    ref = TfliteReference(path)
    for seed in SEEDS:
        feeds = ref.random_inputs(seed)
        want, got = ref.run(feeds), model.run(feeds)
        for name, value in want.items():
            c = got[name].reshape(value.shape)
            diff = int(np.sum(c != value))
            assert diff == 0, f"seed {seed}: {diff} of {value.size} elements of {name} differ"
