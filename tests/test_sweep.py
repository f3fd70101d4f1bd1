"""`opfuse sweep` (issue 22): rows equal analyze's figures, --jobs 1 and 2 give the same file,
a killed or interrupted sweep resumed gives the uninterrupted file, Ray gives the local rows,
--emulate rows equal `validate --backend c --emulate`, and bad input is one line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli import assert_clean_error
from tests.helpers.shared import REPO, shared_model
from tests.helpers.sweep import sweep_cli, sweep_env

MODELS = ("seed_block", "ds_cnn", "tiny_transformer", "bad.onnx")
TARGETS = "cortex-m7,x86-host,mobile-gpu"
# the kill tests need a sweep that runs for a while: every target, bigger models
LONG_MODELS = ("seed_block", "ds_cnn", "tiny_transformer", "mobilenet_v2", "resnet18", "bad.onnx")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a corrupt model, so its rows name it the same in every run (bad.onnx)."""
    path = tmp_path_factory.mktemp("sweep")
    (path / "bad.onnx").write_bytes(b"\x08\x07not a model")
    return path


@pytest.fixture(scope="module")
def reference(folder: Path) -> Path:
    """The uninterrupted sweep, one worker."""
    proc = sweep_cli(folder, *MODELS, "--targets", TARGETS, "-o", "ref.json", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    return folder / "ref.json"


def rows_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def test_one_row_per_model_target_precision_with_error_rows(reference: Path) -> None:
    rows = rows_of(reference)
    keys = {(r["model"], r["target"], r["precision"]) for r in rows}
    assert len(rows) == len(keys) == len(MODELS) * 3 * 3
    bad = [r for r in rows if r["model"] == "bad.onnx"]
    assert len(bad) == 9 and all(r["status"] == "error" for r in bad)
    for r in bad:  # one line naming the file as given, not the worker's temporary copy
        assert r["error"].startswith("bad.onnx: ") and "\n" not in r["error"]
        assert "opfuse-sweep-" not in r["error"]
    assert all(r["status"] != "error" for r in rows if r["model"] != "bad.onnx")
    import opfuse

    assert {r["opfuse_version"] for r in rows} == {opfuse.__version__}
    assert all(len(r["target_sha256"]) == 64 and len(r["model_sha256"]) == 64 for r in rows)


def test_rows_equal_analyze(reference: Path, run_cli, tmp_path: Path) -> None:
    """Each figure is analyze's for that model, target and precision (the independent path:
    one `opfuse analyze --json` process per row, no sweep code)."""
    rows = {(r["model"], r["target"], r["precision"]): r for r in rows_of(reference)}
    for model, target, prec in (("ds_cnn", "cortex-m7", "int8"), ("seed_block", "x86-host", "fp32"),
                                ("tiny_transformer", "mobile-gpu", "fp16")):
        out = tmp_path / f"{model}-{target}-{prec}.json"
        code, _, err = run_cli("analyze", model, "--target", target, "--precision", prec,
                               "--json", str(out))
        assert code == 0, err
        a = json.loads(out.read_text())
        row, dep = rows[(model, target, prec)], a["deployment"]
        assert row["status"] == "ok"
        assert (row["kernels_before"], row["kernels_after"]) == (a["before"]["kernels"],
                                                                 a["after"]["kernels"])
        assert row["traffic_after_bytes"] == a["after"]["traffic_bytes"]
        assert row["macs"] == a["after"]["macs"]
        assert row["peak_arena_bytes"] == dep["arena_bytes"]
        assert row["layer_by_layer_bound_bytes"] == a["after"]["layer_by_layer_lower_bound_bytes"]
        assert (row["fits_ram"], row["ram_margin_bytes"]) == (dep["fits_ram"],
                                                              dep["ram_margin_bytes"])
        assert (row["fits_flash"], row["weight_bytes"]) == (dep["fits_flash"], dep["weight_bytes"])
        assert row["latency_s"] == a["after"]["latency_s"]
        assert row["energy_j"] == a["after"]["energy_j"]
        assert (row["precision_note"] or "") == a["precision_note"]
        refused = sum(1 for d in a["decisions"] if not d["fused"])
        assert row["refused_edges"] == refused


def test_precision_rows_say_why_they_are_skipped(reference: Path) -> None:
    rows = {(r["model"], r["target"], r["precision"]): r for r in rows_of(reference)}
    fp16 = rows[("ds_cnn", "cortex-m7", "fp16")]  # cortex-m7 has no fp16 rate
    assert fp16["status"] == "skipped" and "does not run fp16" in fp16["precision_note"]
    what_if = rows[("ds_cnn", "cortex-m7", "int8")]
    assert what_if["status"] == "ok" and what_if["precision_note"].startswith("what-if")
    assert what_if["peak_arena_bytes"] * 4 == rows[("ds_cnn", "cortex-m7", "fp32")][
        "peak_arena_bytes"]


def test_two_jobs_give_the_same_file(reference: Path, folder: Path) -> None:
    proc = sweep_cli(folder, *MODELS, "--targets", TARGETS, "-o", "two.json", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    assert (folder / "two.json").read_bytes() == reference.read_bytes()
    assert not list(folder.glob(".two.json.partial*"))  # the partial file is gone when done


def _default_sigint() -> None:
    """In the sweep's child before exec: Ctrl-C as a terminal delivers it. A test run started in
    the background of a non-interactive shell inherits SIGINT ignored, and a Python started so
    never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_long(folder: Path, out: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "opfuse", "sweep", *LONG_MODELS, "--targets",
                             "all", "-o", out, "--jobs", "1", "--quiet", *extra], cwd=folder,
                            env=sweep_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)


def _wait_rows(proc: subprocess.Popen, partial: Path, rows: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if partial.is_file() and len(partial.read_text().splitlines()) >= rows:
            return
        assert proc.poll() is None, f"the sweep ended before {rows} rows: {proc.stderr.read()}"
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {rows} rows in {partial} within {timeout} s")


@pytest.fixture(scope="module")
def long_reference(folder: Path) -> Path:
    proc = sweep_cli(folder, *LONG_MODELS, "--targets", "all", "-o", "long.json", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    return folder / "long.json"


def _computed(stdout: str) -> int:
    return int(re.search(r"sweep: (\d+) rows computed", stdout).group(1))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_resume_after_a_stop_gives_the_uninterrupted_file(long_reference: Path, folder: Path,
                                                          sig: signal.Signals) -> None:
    out = folder / f"stopped-{sig.name}.json"
    partial = folder / f".{out.name}.partial.jsonl"
    proc = _start_long(folder, out.name)
    _wait_rows(proc, partial, 6)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    total = len(rows_of(long_reference))
    if sig == signal.SIGKILL:
        assert not out.exists() and partial.is_file()  # killed: only the streamed rows
        done = len(partial.read_text().splitlines())
    else:  # Ctrl-C: what was done is written, exit 130
        assert proc.returncode == 130, stderr
        assert "interrupted" in stdout and not partial.exists()
        done = len(rows_of(out))
    assert 6 <= done < total
    resumed = sweep_cli(folder, *LONG_MODELS, "--targets", "all", "-o", out.name, "--jobs", "2",
                        "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert _computed(resumed.stdout) <= total - done  # the rows done were skipped
    assert out.read_bytes() == long_reference.read_bytes()
    assert not partial.exists()


def test_parquet_and_csv_hold_the_same_rows(reference: Path, folder: Path) -> None:
    pytest.importorskip("pyarrow", reason="pip install pyarrow (Parquet output)")
    from opfuse.sweep.output import read_rows, write_rows

    rows = rows_of(reference)
    for name in ("rows.parquet", "rows.csv"):
        write_rows(folder / name, rows)
        assert read_rows(folder / name) == rows
    import pyarrow.parquet as pq

    from opfuse.sweep.schema import NAMES

    table = pq.read_table(folder / "rows.parquet")
    assert table.column_names == list(NAMES) and table.num_rows == len(rows)
    assert str(table.schema.field("latency_s").type) == "double"


def test_ray_cluster_gives_the_local_rows(reference: Path, folder: Path) -> None:
    """A Ray cluster started here (2 CPUs, 127.0.0.1); the CLI connects to it by address."""
    ray = pytest.importorskip("ray", reason="pip install 'opfuse[ray]' to test --ray")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False)
    try:
        address = ray.get_runtime_context().gcs_address
        proc = sweep_cli(folder, *MODELS, "--targets", TARGETS, "-o", "ray.json", "--ray",
                         address)
    finally:
        ray.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert (folder / "ray.json").read_bytes() == reference.read_bytes()


def _emulated_figures(text: str) -> dict:
    """What `validate --backend c --emulate` prints: footprint totals, instructions, verdict."""
    flash = re.search(r"^\s+total\s+([\d,]+)", text, re.M)  # the first total is flash's
    ram = re.findall(r"^\s+total\s+([\d,]+)", text, re.M)[1]
    arena = re.search(r"^\s+RAM\s+arena\s+([\d,]+)", text, re.M)
    total = re.search(r"invoke total: ([\d,]+) instructions", text)
    n = lambda s: int(s.replace(",", ""))  # noqa: E731
    return {"emu_flash_bytes": n(flash.group(1)), "emu_ram_bytes": n(ram),
            "emu_arena_bytes": n(arena.group(1)), "emu_instructions": n(total.group(1)),
            "match": "result: match" in text}


def test_emulated_rows_equal_validate_emulate(folder: Path, run_cli) -> None:
    import shutil

    if shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("qemu-system-arm / arm-none-eabi-gcc not installed")
    model = shared_model("tflite", "hello_world_int8.tflite")
    proc = sweep_cli(folder, str(model), "--targets", "cortex-m4,cortex-m7,x86-host",
                     "--precisions", "int8,fp32", "--emulate", "-o", "emu.json")
    assert proc.returncode == 0, proc.stderr
    rows = {(r["target"], r["precision"]): r for r in rows_of(folder / "emu.json")}
    for target in ("cortex-m4", "cortex-m7"):
        code, out, err = run_cli("validate", str(model), "--backend", "c", "--emulate",
                                 "--target", target)
        assert code == 0, err
        want = _emulated_figures(out)
        row = rows[(target, "int8")]
        assert {k: row[k] for k in want if k != "match"} == {k: v for k, v in want.items()
                                                              if k != "match"}
        assert want["match"] and row["emu_verdict"] == "bit-exact"
    assert rows[("cortex-m7", "fp32")]["emu_verdict"] == "not run"  # quantized: its own row
    assert rows[("x86-host", "int8")]["emu_verdict"] == "not run"  # no emulated board
    assert rows[("x86-host", "int8")]["emu_instructions"] is None


def test_bad_options_are_one_line(folder: Path, run_cli, monkeypatch) -> None:
    monkeypatch.chdir(folder)
    code, _, err = run_cli("sweep", "seed_block", "--targets", "nosuch", "-o", "x.json")
    assert_clean_error(code, err, "unknown target 'nosuch'")
    code, _, err = run_cli("sweep", "seed_block", "-o", "x.xlsx")
    assert_clean_error(code, err, "x.xlsx")
    code, _, err = run_cli("sweep", "seed_block", "--precisions", "fp64", "-o", "x.json")
    assert_clean_error(code, err, "fp64")
    code, _, err = run_cli("sweep", "no_such_model", "-o", "x.json")
    assert_clean_error(code, err, "no_such_model")
    import importlib.util

    code, _, err = run_cli("sweep", "seed_block", "-o", "x.json", "--ray", "127.0.0.1:1")
    has_ray = importlib.util.find_spec("ray") is not None
    assert_clean_error(code, err, "cannot connect" if has_ray else "opfuse[ray]")
    assert not list(folder.glob(".x.json*"))  # no partial file left
    before = (folder / "bad.onnx").read_bytes()
    code, _, err = run_cli("sweep", "bad.onnx", "-o", "bad.onnx")  # never over an input
    assert_clean_error(code, err, "bad.onnx", "extension")
    assert (folder / "bad.onnx").read_bytes() == before
    assert not (folder / "x.json").exists()


def test_readme_documents_every_column() -> None:
    from opfuse.sweep.schema import COLUMNS

    readme = (REPO / "docs" / "sweep.md").read_text()
    documented = re.findall(r"^\| `([a-z0-9_]+)` \| (string|int64|float64|bool) \|", readme, re.M)
    assert documented == [(c.name, c.type) for c in COLUMNS]


def test_sweep_help_imports_neither_ray_nor_pyarrow() -> None:
    from benchmarks.startup import heavy_imports

    assert not {"ray", "pyarrow", "onnx"} & set(heavy_imports(("sweep", "--help")))


def crash_on_bad(task):  # noqa: ANN001, ANN201 (a worker's task function: module level)
    """run_task, except that the worker process dies outright on bad.onnx (as a crash in a
    native library would take it)."""
    from opfuse.sweep.tasks import run_task

    if task.model.name == "bad.onnx":
        os._exit(3)
    return run_task(task)


def test_a_worker_that_dies_costs_only_its_rows(reference: Path, folder: Path,
                                                monkeypatch) -> None:
    from opfuse.sweep.inputs import model_refs, parse_precisions, target_refs
    from opfuse.sweep.local import run_local
    from opfuse.sweep.run import plan
    from opfuse.sweep.schema import sort_rows

    monkeypatch.chdir(folder)
    tasks = plan(model_refs(list(MODELS)), target_refs(TARGETS),
                 parse_precisions("fp32,fp16,int8"), False, 300.0)
    rows = [row for _, task_rows in run_local(tasks, 2, crash_on_bad) for row in task_rows]
    want = rows_of(reference)
    assert len(rows) == len(want)
    for got, ref in zip(sort_rows(rows), want, strict=True):
        if ref["model"] == "bad.onnx":
            assert got["status"] == "error" and "worker process died" in got["error"]
        else:
            assert got == ref


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_planted_partial_file_is_refused_not_followed(run_cli, tmp_path: Path, kind: str) -> None:
    """DIR/.rows.csv.partial.jsonl was opened with a plain open("w"): a planted symlink had its
    target truncated (the swept model too) and a FIFO blocked the sweep. Now: one line, exit 2,
    the link's target untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    part = tmp_path / ".rows.csv.partial.jsonl"
    if kind == "symlink":
        part.symlink_to(victim)
    else:
        os.mkfifo(part)
    code, _, err = run_cli("sweep", "seed_block", "--targets", "x86-host", "--precisions", "fp32",
                           "-o", str(tmp_path / "rows.csv"), "--jobs", "1", "--quiet")
    assert code == 2 and "partial file" in err and len(err.strip().splitlines()) == 1, err
    assert victim.read_text() == "keep me\n"
    assert not (tmp_path / "rows.csv").exists()


def test_csv_cells_a_spreadsheet_would_run_are_quoted_and_read_back(tmp_path: Path) -> None:
    """A model file named like a formula ("=HYPERLINK(...)") is written behind a quote (CSV
    injection) and reads back as it was (--resume)."""
    from opfuse.sweep.output import encode, read_rows
    from opfuse.sweep.schema import blank_row

    rows = []
    for i, name in enumerate(["=HYPERLINK(\"http://x\")", "+1", "@SUM(A1)", "-2", "'quoted", "plain"]):
        row = blank_row()
        row.update(model=name, target=f"t{i}", precision="fp32", status="ok")
        rows.append(row)
    path = tmp_path / "rows.csv"
    path.write_text(encode(rows, ".csv"))
    cells = [line.split(",")[0] for line in path.read_text().splitlines()[1:]]
    assert all(not c.lstrip('"').startswith(("=", "+", "@", "-")) for c in cells), cells
    assert sorted(r["model"] for r in read_rows(path)) == sorted(r["model"] for r in rows)


def test_a_local_ray_cluster_requires_a_token(monkeypatch) -> None:
    """Ray 2.60's servers listen on every interface whatever node address is asked for, with no
    authentication by default; `--ray local` turns on its token authentication with a fresh
    random token (inherited by the cluster's processes), and leaves a cluster address and a
    user's own auth settings alone."""
    from opfuse.sweep.ray_exec import require_token

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        monkeypatch.delenv(name, raising=False)
    require_token("10.0.0.1:6379")
    assert "RAY_AUTH_MODE" not in os.environ
    require_token("local")
    first = os.environ["RAY_AUTH_TOKEN"]
    assert os.environ["RAY_AUTH_MODE"] == "token" and re.fullmatch(r"[0-9a-f]{64}", first)
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's choice stands
    require_token("local")
    assert os.environ["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in os.environ


def test_input_shape_binds_a_dynamic_model_in_the_sweep(run_cli, tmp_path: Path, monkeypatch) -> None:
    """A model with symbolic dims is an error row that says to bind it; with --input-shape its row
    has analyze's figures for the same binding, and the binding is part of the row's options (so
    --resume does not mistake it for an unbound row). A malformed binding is one line, exit 2."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "dyn.onnx")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("sweep", "dyn.onnx", "--targets", "x86-host", "--precisions", "fp32",
                           "-o", "free.json", "--quiet")
    assert code == 0, err
    (free,) = rows_of(tmp_path / "free.json")
    assert free["status"] == "error" and "--input-shape" in free["error"]
    code, _, err = run_cli("sweep", "dyn.onnx", "--targets", "x86-host", "--precisions", "fp32",
                           "-o", "bound.json", "--quiet", "--input-shape", "x=1x3x16x20")
    assert code == 0, err
    (row,) = rows_of(tmp_path / "bound.json")
    assert row["status"] == "ok" and "input_shape=x=1x3x16x20" in row["options"]
    code, _, err = run_cli("analyze", "dyn.onnx", "--target", "x86-host", "--input-shape",
                           "x=1x3x16x20", "--json", "a.json")
    assert code == 0, err
    a = json.loads((tmp_path / "a.json").read_text())
    assert row["macs"] == a["after"]["macs"] == 4 * 3 * 9 * 16 * 20
    assert row["peak_arena_bytes"] == a["deployment"]["arena_bytes"]
    code, _, err = run_cli("sweep", "dyn.onnx", "-o", "bad.json", "--input-shape", "x=1xtwo")
    assert_clean_error(code, err, "x=1xtwo")
    assert not (tmp_path / "bad.json").exists()
