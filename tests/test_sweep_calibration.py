"""`opfuse sweep --precisions int8 --calibration DATA` (docs/sweep.md): a float model's int8 row is
a real int8 build (the model `opfuse quantize` writes, compiled and costed at its own dtypes),
said in its `calibration` column and `options`; `--resume` keeps it apart from the what-if row;
a model DATA does not fit is that model's error row; bad DATA is one line with exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.cli import assert_clean_error
from tests.helpers.sweep import sweep_cli


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sweepcal")
    np.savez(folder / "cal.npz", input=np.random.default_rng(0).standard_normal(
        (16, 1, 49, 10)).astype(np.float32))
    return folder


def _rows(path: Path) -> dict[tuple[str, str, str], dict]:
    return {(r["model"], r["precision"], r["options"]): r for r in json.loads(path.read_text())}


def test_the_int8_row_is_the_quantized_build_and_resume_keeps_it_apart(data: Path, run_cli):
    from opfuse import api

    proc = sweep_cli(data, "ds_cnn", "seed_block", "--targets", "cortex-m7", "--precisions",
                     "fp32,int8", "-o", "rows.json", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    what_if = _rows(data / "rows.json")
    assert len(what_if) == 4
    proc = sweep_cli(data, "ds_cnn", "seed_block", "--targets", "cortex-m7", "--precisions",
                     "fp32,int8", "--calibration", "cal.npz", "-o", "rows.json", "--jobs", "1",
                     "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "2 rows computed" in proc.stdout  # the fp32 rows were kept, the int8 ones are new
    rows = _rows(data / "rows.json")
    assert len(rows) == 6 and set(what_if) < set(rows)
    real = [r for r in rows.values() if r["calibration"]]
    assert [r["model"] for r in real] == ["ds_cnn"]
    row = real[0]
    assert row["options"].startswith("emulate=0;calibration=")
    assert row["precision_note"].startswith("a real int8 build")
    # the figures are those of the model opfuse quantize writes from the same data
    code, _, err = run_cli("quantize", "ds_cnn", "--target", "cortex-m7", "-o",
                           str(data / "q.onnx"), "--calibration", str(data / "cal.npz"),
                           "--json", str(data / "q.json"))
    assert code == 0, err
    analysis = api.analyze(api.compile(str(data / "q.onnx"), "cortex-m7")).to_json()
    assert row["peak_arena_bytes"] == analysis["after"]["peak_arena_bytes"]
    assert row["kernels_after"] == analysis["after"]["kernels"]
    assert row["precision_used"] == "int8"
    report = json.loads((data / "q.json").read_text())
    assert row["int8_sqnr_db"] == pytest.approx(report["outputs"][0]["sqnr_db"], abs=1e-3)
    old = next(r for k, r in what_if.items() if k[:2] == ("ds_cnn", "int8"))
    assert old["precision_note"].startswith("what-if") and old["calibration"] is None
    # seed_block takes another shape: its int8 row is an error naming DATA, not a temp path
    bad = rows[("seed_block", "int8", row["options"])]
    assert bad["status"] == "error"
    assert bad["error"].startswith("cal.npz: input 'input' has shape 16x1x49x10; the model takes")


@pytest.mark.parametrize("case,message", [
    ("no_int8", "--calibration quantizes the int8 rows: add int8 to --precisions"),
    ("nan", "holds NaN (first at sample 1)"),
    ("int", "calibration data must be float"),
    ("missing", "cal.npz: no such file"),
])
def test_bad_calibration_is_one_line_and_writes_nothing(case, message, tmp_path, run_cli) -> None:
    good = np.random.default_rng(0).standard_normal((4, 1, 49, 10)).astype(np.float32)
    arrays = {"nan": good.copy(), "int": good.astype(np.int32), "no_int8": good}
    if case == "nan":
        arrays["nan"][1, 0, 0, 0] = np.nan
    path = tmp_path / "cal.npz"
    if case in arrays:
        np.savez(path, input=arrays[case])
    precisions = "fp32" if case == "no_int8" else "int8"
    out = tmp_path / "rows.json"
    code, _, err = run_cli("sweep", "ds_cnn", "--targets", "cortex-m7", "--precisions",
                           precisions, "--calibration", str(path), "-o", str(out), "--quiet")
    assert_clean_error(code, err, message)
    assert not out.exists() and not list(tmp_path.glob(".rows.json*"))


@pytest.mark.skipif(any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm")
def test_emulate_runs_the_int8_build(data: Path, run_cli) -> None:
    """With --emulate the calibrated int8 row's figures are the QEMU run of the model `opfuse
    quantize` writes from the same data (instructions are deterministic), bit-exact against it."""
    from opfuse import api

    proc = sweep_cli(data, "ds_cnn", "--targets", "cortex-m7", "--precisions", "int8",
                     "--calibration", "cal.npz", "--emulate", "-o", "emu.json", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((data / "emu.json").read_text())
    assert row["calibration"] == "cal.npz" and row["emu_verdict"] == "bit-exact", row
    code, _, err = run_cli("quantize", "ds_cnn", "--target", "cortex-m7", "-o",
                           str(data / "e.onnx"), "--calibration", str(data / "cal.npz"))
    assert code == 0, err
    emu = api.emulate_c(str(data / "e.onnx"), "cortex-m7")
    assert row["emu_instructions"] == emu.instructions
    assert row["emu_arena_bytes"] == emu.footprint.arena == row["peak_arena_bytes"]
