"""Every int8 model of ../shared/models/tflite, compiled to C, is bit-identical to TFLite Micro on
20 seeded random inputs (all elements equal), fused and unfused; one also runs clean under
ASan and UBSan with -Wall -Wextra -Werror -std=c99."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tflite"


def _int8_models() -> list[Path]:
    if not SHARED.is_dir():
        return []
    from opfuse.measure.validate.tflite_reference import TfliteReference

    return [p for p in sorted(SHARED.glob("*.tflite"))
            if TfliteReference(p).kind == "tflite-micro"]


MODELS = _int8_models()


def _need_models() -> None:
    if not MODELS:
        pytest.skip("../shared/models not present")


@pytest.mark.parametrize("name", [p.stem for p in MODELS] or ["none"])
def test_int8_model_bit_exact_with_tflite_micro(name: str) -> None:
    _need_models()
    from opfuse.api import compile
    from opfuse.measure.validate.c_int8 import validate_c_int8

    report = validate_c_int8(compile(SHARED / f"{name}.tflite"), trials=20, steps=0)
    assert report.ok, "\n".join(report.notes)
    for check in report.outputs:
        assert check.max_abs_err == 0  # in quantization steps: every element equal


def test_unfused_int8_model_is_bit_exact_too() -> None:
    _need_models()
    from opfuse.api import compile
    from opfuse.measure.validate.c_int8 import validate_c_int8

    path = next((p for p in MODELS if p.stem == "kws_ref_model"), MODELS[0])
    report = validate_c_int8(compile(path), fuse=False, trials=5, steps=0)
    assert report.ok, "\n".join(report.notes)


def test_int8_model_sanitizers(tmp_path: Path) -> None:
    _need_models()

    from opfuse.api import compile
    from opfuse.backends.c import emit_c
    from opfuse.measure.run.host import build_executable, manifest, run_executable
    from opfuse.measure.validate.tflite_reference import TfliteReference

    path = next((p for p in MODELS if p.stem == "kws_ref_model"), MODELS[0])
    folder = tmp_path / "m"
    emit_c(compile(path), folder)
    exe = build_executable(folder, ["-O1", "-g", "-fsanitize=address,undefined",
                                    "-fno-sanitize-recover=undefined"], name="asan")
    info = manifest(folder)
    ref = TfliteReference(path)
    for seed in range(2):
        feeds = ref.random_inputs(seed)
        got, proc = run_executable(exe, info, feeds, env={"ASAN_OPTIONS": "detect_leaks=0"})
        assert "runtime error" not in proc.stderr
        want = ref.run(feeds)
        for k, v in want.items():
            assert np.array_equal(got[k].reshape(v.shape), v)
