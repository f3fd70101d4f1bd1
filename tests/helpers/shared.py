"""The wider corpus of real models beside the repository (../shared/models, for benchmarks and
extended tests). A bare clone has none: every test that reads it skips with SHARED_ABSENT instead
of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_MODELS = REPO.parent / "shared" / "models"
SHARED_ONNX = SHARED_MODELS / "onnx"
SHARED_ABSENT = "../shared/models not present"


# Mark a test or module that needs the shared corpus: `pytestmark = requires_shared("tflite")`.
def requires_shared(kind: str = "") -> pytest.MarkDecorator:
    folder = SHARED_MODELS / kind if kind else SHARED_MODELS
    return pytest.mark.skipif(not folder.is_dir(), reason=f"{SHARED_ABSENT} ({folder})")


def shared_models(kind: str, suffix: str | None = None) -> list[Path]:
    """The files of ``../shared/models/KIND`` (``*.KIND`` unless ``suffix`` says otherwise),
    sorted; empty when the corpus is absent, so a parametrized test is reported as skipped."""
    return sorted((SHARED_MODELS / kind).glob(f"*.{suffix or kind}"))


def shared_model(kind: str, name: str) -> Path:
    """The path of one shared model; skips the calling test when it is absent."""
    path = SHARED_MODELS / kind / name
    if not path.is_file():
        pytest.skip(f"{SHARED_ABSENT} ({path})")
    return path


def shared_onnx(name: str) -> Path:
    return shared_model("onnx", name)


def shared_onnx_models() -> list[Path]:
    return shared_models("onnx")
