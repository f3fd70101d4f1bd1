"""One fuzz case: the `opfuse` commands on one (mutated) model, each in a forked child with a
timeout, and the classification of how each ended (benchmarks/fuzz.py drives it).

Outcomes: ``ok`` (exit 0 and a readable output), ``exit1`` (a validation mismatch), ``rejected``
(exit 2 with one line), ``unsupported`` (exit 3 with one line: an op with no C kernel, which is no
fault of the model), and the bad ones: ``traceback`` (an escaped exception, or an error of more
than one line), ``hang`` (past the timeout), ``crash`` (the child died), ``half_written`` (an output
left after a failing command, a temporary file left behind, or an unreadable output) and
``bad_exit``.
"""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

GOOD = ("ok", "exit1", "rejected", "unsupported")  # exit 0, 1, and 2 or 3 with one line
BAD = ("traceback", "hang", "crash", "half_written", "bad_exit")
# validate --backend c builds and runs the C beside the reference: only for models this small
VALIDATE_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Outcome:
    kind: str  # one of GOOD or BAD
    detail: str  # the command and its last stderr line, for the report


def _child(argv: list[str], write_fd: int) -> None:
    """Run the CLI in this (forked) process; report (exit code, stderr) on ``write_fd``. The
    stderr includes what native libraries write on fds 1 and 2 (a user's terminal shows both)."""
    import tempfile

    from opfuse.cli import main

    native = tempfile.TemporaryFile()  # TFLite Micro prints on fd 1, onnxruntime's log on fd 2
    os.dup2(native.fileno(), 1)
    os.dup2(native.fileno(), 2)
    err = io.StringIO()
    sys.stdout = io.StringIO()
    sys.stderr = err
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # an escaped exception: what the fuzzer is here to find
        import traceback

        traceback.print_exc(file=err)
        code = 99
    native.seek(0)
    text = native.read().decode("utf-8", "replace") + err.getvalue()
    payload = json.dumps({"code": code, "err": text[-4000:]}).encode()
    os.write(write_fd, payload)
    os._exit(0)


def run_cli_forked(argv: list[str], timeout: float) -> tuple[int | None, str, str]:
    """(exit code or None, stderr, status) of the CLI run in a forked child: status is
    'done', 'hang' or 'crash' (the child died without reporting)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.setpgid(0, 0)  # its own group: a hang's compiler and runner die with it
        try:
            _child(argv, write_fd)
        finally:
            os._exit(3)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    status = "done"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            _kill_group(pid)
            status = "hang"
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    _, wstatus = os.waitpid(pid, 0)
    if status == "hang":
        return None, "", "hang"
    try:
        report = json.loads(b"".join(chunks))
    except ValueError:
        sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else None
        return None, f"child died (signal {sig})", "crash"
    return report["code"], report["err"], "done"


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


# --- what each command must leave behind -----------------------------------------------------

def _parse_onnx(path: Path) -> None:
    proto = onnx.ModelProto()
    proto.ParseFromString(path.read_bytes())
    if not proto.graph.node and not proto.graph.output:
        raise ValueError("empty")


def _parse_analysis(folder: Path) -> None:
    json.loads((folder / "a.json").read_text())
    if "</html>" not in (folder / "a.html").read_text():
        raise ValueError("the page is cut short")


def _parse_c(path: Path) -> None:
    if not any(p.suffix == ".c" and p.stat().st_size for p in path.iterdir()):
        raise ValueError("no C file")


def _nothing(_folder: Path) -> None:
    return None


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]  # with {src} and {dir} to fill in
    outputs: tuple[str, ...]  # the files or folders it writes on success
    check: Callable[[Path], None]  # raises when what it wrote is unreadable


COMMANDS = (
    Command(("compile", "{src}", "-o", "{dir}/out.onnx"), ("out.onnx",),
            lambda d: _parse_onnx(d / "out.onnx")),
    Command(("analyze", "{src}", "--json", "{dir}/a.json", "--html", "{dir}/a.html"),
            ("a.json", "a.html"), _parse_analysis),
    Command(("compile", "{src}", "--emit", "c", "-o", "{dir}/c"), ("c",), lambda d: _parse_c(d / "c")),
    Command(("validate", "{src}", "--backend", "c"), (), _nothing),
)


def _classify(command: Command, folder: Path, src: Path, code: int | None, err: str,
              status: str) -> Outcome:
    verb = " ".join(a for a in command.argv[:4] if not a.startswith("{")
                    and not a.endswith((".onnx", ".json", ".html")))
    label = f"{verb}: {err.strip().splitlines()[-1] if err.strip() else status}"
    left = sorted(p.name for p in folder.iterdir() if p != src)
    if status != "done":
        return Outcome(status, label)
    if "Traceback" in err or code == 99:
        return Outcome("traceback", f"{verb}: {err.strip()[-600:]}")
    if code not in (0, 1, 2, 3):
        return Outcome("bad_exit", f"{verb}: exit {code}: {err.strip()[-300:]}")
    if code in (2, 3) and len(err.strip().splitlines()) != 1:
        return Outcome("traceback", f"{verb}: not one line: {err.strip()[-600:]}")
    expected = sorted(command.outputs) if code == 0 else []
    if left != expected:
        return Outcome("half_written", f"{label} (files: {left})")
    if code == 0:
        try:
            command.check(folder)
        except Exception as exc:  # an unreadable output is a half-written one
            return Outcome("half_written", f"{label} (unreadable: {type(exc).__name__}: {exc})")
    return Outcome({0: "ok", 1: "exit1", 2: "rejected", 3: "unsupported"}[code], label)


def _clear(folder: Path, keep: Path) -> None:
    for p in folder.iterdir():
        if p == keep:
            continue
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def run_case(model_bytes: bytes, folder: Path, timeout: float, suffix: str = ".onnx",
             commands: tuple[Command, ...] = COMMANDS, validate: bool = True) -> Outcome:
    """Run ``commands`` on one (mutated) model; the worst outcome. A rejected model ends the case:
    every command starts with the same import and compile, so the rest would refuse it too.
    ``validate`` False (or a model over VALIDATE_MAX_BYTES) leaves out `validate --backend c`."""
    src = folder / f"model{suffix}"
    src.write_bytes(model_bytes)
    worst = Outcome("ok", "")
    for command in commands:
        if command.argv[0] == "validate" and (not validate or len(model_bytes) > VALIDATE_MAX_BYTES):
            continue
        argv = [a.format(src=src, dir=folder) for a in command.argv]
        code, err, status = run_cli_forked(argv, timeout)
        outcome = _classify(command, folder, src, code, err, status)
        _clear(folder, src)
        if outcome.kind in BAD or (worst.kind == "ok" and outcome.kind != "ok"):
            worst = outcome
        if outcome.kind in BAD or outcome.kind == "rejected" and command is commands[0]:
            break
    return worst
