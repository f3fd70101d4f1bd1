"""One check for every sanitizer test of generated C: build ``folder`` under ASan + UBSan, run it
on the reference inputs of ``source``, and compare with onnxruntime (skip where the compiler has
no sanitizer runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opfuse.errors import OpfuseError
from opfuse.measure.run.host import build_executable, manifest, run_executable
from opfuse.measure.validate.c_float import reference

SAN = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
       "-fno-omit-frame-pointer"]  # fmt: skip


def sanitized_run_matches(
    folder: Path, source: str | Path, rel: float = 1e-4, atol: float = 1e-6
) -> None:
    """The C in ``folder``, built with ``SAN``, has no runtime error and is within ``atol`` +
    ``rel`` x max|reference| of onnxruntime on every output."""
    try:
        exe = build_executable(folder, SAN)
    except OpfuseError as exc:
        if "sanitize" in str(exc) or "asan" in str(exc):
            pytest.skip("the compiler has no sanitizer runtime")
        raise
    feeds, ref, _ = reference(source)
    info = manifest(folder)
    got, proc = run_executable(exe, info, feeds, env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert "runtime error" not in proc.stderr, proc.stderr[-2000:]
    for key, value in ref.items():
        mine = np.asarray(got[key]).reshape(value.shape)
        assert float(np.abs(mine - value).max()) <= rel * float(np.abs(value).max()) + atol, key
