"""Every output option goes through opfuse/output: the input model is never written (by path,
symlink or hard link), FIFOs and devices are written into and survive, and `--emit c` never
replaces a user's files or leaves a folder half-written (docs/architecture.md, "Outputs and
limits")."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.errors import OpfuseError
from tests.helpers.cli import assert_clean_error


def _conv_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(_conv_model(), path)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry under ``folder``: content digest (or 'dir') and inode, to see replacements."""
    out = {}
    for path in sorted(folder.rglob("*")):
        kind = "dir" if path.is_dir() else _digest(path)
        out[str(path.relative_to(folder))] = (kind, path.lstat().st_ino)
    return out


COMMANDS = [
    ("analyze", "{m}", "--html", "{o}"),
    ("analyze", "{m}", "--json", "{o}"),
    ("fusion", "{m}", "--json", "{o}"),
    ("explore", "{m}", "-o", "{o}"),
    ("compile", "{m}", "-o", "{o}"),
    ("compile", "{m}", "--emit", "c", "-o", "{o}"),
    ("bench", "{m}", "--json", "{o}"),
]


@pytest.mark.parametrize("spelling", ["same", "symlink", "hardlink", "dotted"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c[0:3:2]))
def test_no_command_writes_over_the_input_model(run_cli, model: Path, tmp_path: Path,
                                                 command: tuple, spelling: str) -> None:
    out = {"same": model, "symlink": tmp_path / "link.onnx", "hardlink": tmp_path / "hard.onnx",
           "dotted": tmp_path / "." / "m.onnx"}[spelling]
    if spelling == "symlink":
        out.symlink_to(model.name)
    elif spelling == "hardlink":
        os.link(model, out)
    before = _digest(model)
    code, _, err = run_cli(*(a.format(m=model, o=out) for a in command))
    assert_clean_error(code, err, "input model")
    assert _digest(model) == before
    assert out.is_symlink() == (spelling == "symlink")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_fifo_at_the_output_is_written_into_and_survives(run_cli, model: Path,
                                                           tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, _, err = run_cli("fusion", str(model), "--json", str(fifo))
    reader.join(timeout=30)
    assert code == 0, err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(received[0])["kernels"]


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_a_device_at_the_output_is_written_into_and_survives(run_cli, model: Path,
                                                             tmp_path: Path) -> None:
    null = os.stat("/dev/null")
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, null.st_rdev)
    for args in (("analyze", str(model), "--json", str(device)),
                 ("analyze", str(model), "--html", str(device)),
                 ("compile", str(model), "-o", str(device))):
        code, _, err = run_cli(*args)
        assert code == 0, err
        st = device.lstat()
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev, args


def test_a_symlink_to_a_regular_file_has_its_target_written(run_cli, model: Path,
                                                            tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    code, _, err = run_cli("fusion", str(model), "--json", str(link))
    assert code == 0, err
    assert link.is_symlink() and json.loads(target.read_text())["kernels"]


@pytest.mark.parametrize("name", ["/proc/self/fd/1", "/dev/fd/1"])
def test_stdout_by_name_is_the_process_descriptor(model: Path, tmp_path: Path, name: str) -> None:
    """`--json /proc/self/fd/1 > FILE`: written at stdout's own offset, the FILE not replaced.
    (Not /dev/stdout itself: a broken writer would replace the machine's /dev/stdout; these
    names resolve through /proc, where no rename can land.)"""
    import subprocess
    import sys

    out = tmp_path / "out.txt"
    with open(out, "wb") as fh:
        fh.write(b"before\n")
        fh.flush()
        inode = os.fstat(fh.fileno()).st_ino
        subprocess.run([sys.executable, "-m", "opfuse", "fusion", str(model), "--json",
                        name], stdout=fh, check=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    text = out.read_text()
    assert out.stat().st_ino == inode
    assert text.startswith("before\n{") and '"kernels"' in text


def _emit(run_cli, model: Path, folder: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli("compile", str(model), "--emit", "c", "-o", str(folder), *extra)


def test_a_users_main_c_survives_emit_c(run_cli, model: Path, tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "main.c").write_text("int main(void) { return 42; }\n")
    before = _tree(folder)
    code, _, err = _emit(run_cli, model, folder)
    assert_clean_error(code, err, "main.c", "did not write", "--force")
    assert _tree(folder) == before


def test_force_replaces_ours_and_keeps_the_users(run_cli, model: Path, tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    (folder / "data").mkdir()
    (folder / "data" / "x.bin").write_bytes(b"\x00\x01")
    code, _, err = _emit(run_cli, model, folder, "--force")
    assert code == 0, err
    assert (folder / "notes.txt").read_text() == "mine\n"
    assert (folder / "data" / "x.bin").read_bytes() == b"\x00\x01"
    recorded = json.loads((folder / "model.json").read_text())["files"]
    assert "model.c" in recorded and "notes.txt" not in recorded
    # the user's files stay the user's: the next emit needs --force again
    assert_clean_error(*_emit(run_cli, model, folder)[::2], "did not write")


def test_an_emit_into_its_own_folder_needs_no_force(run_cli, model: Path, tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    assert _emit(run_cli, model, folder)[0] == 0
    first = set(os.listdir(folder))
    assert set(json.loads((folder / "model.json").read_text())["files"]) == first
    (folder / "main.o").write_bytes(b"obj")  # what its Makefile builds is its own too
    (folder / "opfuse_demo").write_bytes(b"exe")
    assert _emit(run_cli, model, folder)[0] == 0
    assert set(os.listdir(folder)) == first


def test_the_input_model_inside_the_folder_is_kept(run_cli, tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    inner = folder / "m.onnx"
    onnx.save(_conv_model(), inner)
    before = _digest(inner)
    code, _, err = _emit(run_cli, inner, folder)
    assert_clean_error(code, err, "m.onnx")
    assert _emit(run_cli, inner, folder, "--force")[0] == 0
    assert _digest(inner) == before and (folder / "model.c").exists()


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"),
                                     KeyboardInterrupt()], ids=["disk-full", "ctrl-c"])
def test_a_failure_half_way_leaves_the_folder_as_it_was(model: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        failure: BaseException) -> None:
    from opfuse import api

    folder = tmp_path / "proj"
    result = api.compile(model, target="x86-host")
    api.emit_c(result, folder, fuse=False)  # a previous project of ours...
    (folder / "notes.txt").write_text("mine\n")  # ...and a user's file beside it
    before = _tree(folder)
    real_write = Path.write_text
    calls = []

    def failing_write(self: Path, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(self.name)
        if len(calls) == 4:
            raise failure
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing_write)
    with pytest.raises((OpfuseError, KeyboardInterrupt)):
        api.emit_c(result, folder, force=True)
    monkeypatch.undo()
    assert len(calls) == 4
    assert _tree(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "proj"]


@pytest.mark.parametrize("failure", [OSError(errno.EIO, "Input/output error"),
                                     KeyboardInterrupt()], ids=["io-error", "ctrl-c"])
def test_a_failure_while_moving_files_in_puts_the_old_ones_back(
        model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        failure: BaseException) -> None:
    from opfuse import api
    from opfuse.output import tree

    folder = tmp_path / "proj"
    result = api.compile(model, target="x86-host")
    api.emit_c(result, folder, fuse=False)
    (folder / "notes.txt").write_text("mine\n")
    before = _tree(folder)
    real_replace = os.replace
    calls = []

    def replace(a, b):  # noqa: ANN001, ANN202
        calls.append(b)
        if len(calls) == 3:  # two new files are in, the third move fails
            raise failure
        return real_replace(a, b)

    monkeypatch.setattr(tree.os, "replace", replace)
    with pytest.raises((OpfuseError, KeyboardInterrupt)):
        api.emit_c(result, folder, force=True)
    monkeypatch.undo()
    assert len(calls) == 5  # three moves in (the third failed), then the two old files back
    assert _tree(folder) == before  # same bytes and same inodes: the old files themselves
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "proj"]


def test_emit_into_the_working_folder_keeps_it(model: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`-o .` from inside the folder: the folder itself is kept (a shell stays in it)."""
    from opfuse import api

    folder = tmp_path / "proj"
    result = api.compile(model, target="x86-host")
    api.emit_c(result, folder)
    inode = folder.stat().st_ino
    monkeypatch.chdir(folder)
    api.emit_c(result, ".")
    assert folder.stat().st_ino == inode and (folder / "model.c").exists()


def test_a_folder_without_our_manifest_is_refused(run_cli, model: Path, tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "model.json").write_text('{"not": "ours"}')
    code, _, err = _emit(run_cli, model, folder)
    assert_clean_error(code, err, "model.json", "did not write")
    assert (folder / "model.json").read_text() == '{"not": "ours"}'


def test_dash_is_stdout(run_cli, model: Path) -> None:
    code, out, err = run_cli("fusion", str(model), "--json", "-")
    assert code == 0, err
    assert json.loads(out)["kernels"]


def test_a_planted_manifest_cannot_make_emit_delete_a_users_file(run_cli, model: Path,
                                                                  tmp_path: Path) -> None:
    """A model.json that claims the user's app.c as opfuse's (no hashes, or hashes that do not
    match) gives opfuse nothing to delete: app.c is the user's, so the emit needs --force, and
    even with --force app.c stays."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "app.c").write_text("int app(void) { return 7; }\n")
    for planted in ({"arena_bytes": 0, "files": ["app.c"]},
                    {"arena_bytes": 0, "files": ["app.c"], "file_sha256": {"app.c": "0" * 64}}):
        (folder / "model.json").write_text(json.dumps(planted))
        code, _, err = _emit(run_cli, model, folder)
        assert_clean_error(code, err, "app.c", "did not write")
        assert _emit(run_cli, model, folder, "--force")[0] == 0
        assert (folder / "app.c").read_text() == "int app(void) { return 7; }\n"


def test_an_edited_generated_file_is_the_users(run_cli, model: Path, tmp_path: Path) -> None:
    """A generated file whose content no longer has its recorded hash was edited: it is not
    replaced without --force."""
    folder = tmp_path / "proj"
    assert _emit(run_cli, model, folder)[0] == 0
    with (folder / "model.c").open("a") as fh:
        fh.write("/* my change */\n")
    assert_clean_error(*_emit(run_cli, model, folder)[::2], "model.c", "did not write")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c[0:3:2]))
def test_no_command_writes_over_the_input_models_external_data(run_cli, tmp_path: Path,
                                                                command: tuple) -> None:
    """An ONNX model's weights in a file beside it are part of the input: `compile m.onnx -o
    w.bin` (or --json / --html w.bin) once overwrote them."""
    model = tmp_path / "m.onnx"
    onnx.save_model(_conv_model(), model, save_as_external_data=True,
                    all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    data = tmp_path / "w.bin"
    before = _digest(data)
    code, _, err = run_cli(*(a.format(m=model, o=data) for a in command))
    assert_clean_error(code, err, "external data 'w.bin'")
    assert _digest(data) == before
