"""A model argument is a file when it is a file, otherwise a built-in name; a folder never is
(issue 14, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opfuse import models


def _kernels(run_cli, source: str) -> int:
    code, out, err = run_cli("fusion", source, "--json", "-")
    assert code == 0, err
    return len(json.loads(out)["kernels"])


def test_folder_does_not_hide_the_builtin(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    expected = _kernels(run_cli, "ds_cnn")
    (tmp_path / "ds_cnn").mkdir()  # what `compile ds_cnn --emit c -o ds_cnn` leaves behind
    (tmp_path / "ds_cnn" / "model.c").write_text("/* generated */\n")
    assert _kernels(run_cli, "ds_cnn") == expected


def test_file_wins_over_the_builtin(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    seed = _kernels(run_cli, "seed_block")
    (tmp_path / "seed_block").write_bytes(models.build_model("ds_cnn").SerializeToString())
    got = _kernels(run_cli, "seed_block")
    assert got != seed and got == _kernels(run_cli, "ds_cnn")


@pytest.mark.parametrize("kind", ["folder", "missing"])
def test_error_says_what_was_tried(run_cli, tmp_path: Path, monkeypatch, kind: str) -> None:
    monkeypatch.chdir(tmp_path)
    if kind == "folder":
        (tmp_path / "net").mkdir()
    code, out, err = run_cli("analyze", "net", "--json", "-")
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    tried = "a folder, not a model file" if kind == "folder" else "no such file"
    assert f"net: {tried}, and not a built-in model name" in line
    assert "ds_cnn" in line  # the built-ins are listed


def test_public_api_names_are_the_functions_not_modules() -> None:
    """`opfuse.validate` is the API's function even after the validation module is imported."""
    import opfuse
    import opfuse.measure.validate.ort  # noqa: F401

    for name in ("validate", "compile", "analyze", "emit_c", "validate_c"):
        assert callable(getattr(opfuse, name)), name
    report = opfuse.validate("seed_block", opfuse.emit(opfuse.compile("seed_block")))
    assert report.ok
