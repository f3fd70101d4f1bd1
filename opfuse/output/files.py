"""One output file: refuse the input model, rename over regular files, write into the rest
(the rules are in opfuse/output/__init__.py; docs/architecture.md, "Outputs and limits")."""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from opfuse.errors import OpfuseError

STDOUT = "-"
_MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup (MAXSYMLINKS)
_SPECIAL_ROOTS = ("/proc/", "/dev/")  # /dev/stdout, /proc/self/fd/N: the open file, not a name
_OWN_FD = re.compile(rf"/(?:dev/fd|proc/self/fd|proc/{os.getpid()}/fd)/(\d+)")
_STD_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def current_umask() -> int:
    """The process umask, read without changing it where /proc says it (Linux >= 4.7); else set and
    restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umask_mode(base: int = 0o666) -> int:
    """``base`` less the umask: the mode a plain ``open()`` (0o666) or ``mkdir()`` (0o777) gives."""
    return base & ~current_umask()


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)  # follows symlinks; hard links share the inode
    except OSError:  # either is absent or unreadable: not the same existing file
        return False


@functools.lru_cache(maxsize=16)
def _external_data(model: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """The external data files an ONNX model names (``location``, beside it), read without
    loading them; none for a file that is not ONNX or cannot be read."""
    del mtime_ns, size  # the cache key: a rewritten model is read again
    try:
        import onnx
        from onnx import external_data_helper as helper

        proto = onnx.load(model, load_external_data=False)
    except Exception:  # noqa: BLE001 - not an ONNX file (a .tflite, garbage): nothing beside it
        return ()
    found = []
    for tensor in helper._get_all_tensors(proto):
        if helper.uses_external_data(tensor):
            location = {e.key: e.value for e in tensor.external_data}.get("location", "")
            if location:
                found.append(str(Path(model).parent / location))
    return tuple(dict.fromkeys(found))


def input_files(model: str | Path) -> tuple[Path, ...]:
    """The files an input model is made of: the model, and for ONNX its external data."""
    path = Path(model)
    try:
        st = path.stat()
    except OSError:
        return (path,)
    if path.suffix.lower() != ".onnx":
        return (path,)
    return (path, *map(Path, _external_data(str(path), st.st_mtime_ns, st.st_size)))


def check_output(path: str | Path, protect: Iterable[str | Path | None] = ()) -> None:
    """Refuse ``path`` when it is (or links to) one of ``protect``, the command's input models,
    or a file of theirs (an ONNX model's external data). Commands call it before any work, so a
    refused output costs nothing and writes nothing."""
    if str(path) == STDOUT:
        return
    for model in protect:
        if model is None:
            continue
        for part in input_files(model):
            if _same_file(Path(path), part):
                what = "the input model" if part == Path(model) else \
                    f"the external data '{part.name}' of the input model"
                raise OpfuseError(
                    f"{path}: is {what} {model} (the same file); refusing to overwrite it, "
                    "choose another output"
                )


def _link_chain(path: Path) -> tuple[Path, bool]:
    """Where renaming should happen for ``path``, and whether a hop went through /proc or /dev
    (a descriptor's magic link, to be written into rather than replaced)."""
    hops = 0
    while path.is_symlink() and hops < _MAX_LINKS:
        if str(path).startswith(_SPECIAL_ROOTS):
            return path, True
        target = Path(os.readlink(path))
        path = target if target.is_absolute() else path.parent / target
        hops += 1
    return path, False


def _own_descriptor(path: Path) -> int | None:
    """N when ``path`` names this process's descriptor N (``/dev/stdout``, ``/proc/self/fd/N``):
    written through the descriptor, at its offset, as the shell that opened it expects."""
    text = os.path.normpath(str(path))
    if text in _STD_NAMES:
        return _STD_NAMES[text]
    match = _OWN_FD.fullmatch(text)
    return int(match.group(1)) if match else None


def _write_into(path: Path, payload: bytes) -> None:
    """An existing non-regular file: open it and write, as a shell's ``>`` would."""
    try:
        fd = _own_descriptor(path)
        if fd is None:
            with open(path, "wb") as fh:
                fh.write(payload)
            return
        stream = {1: sys.stdout, 2: sys.stderr}.get(fd)
        if stream is not None:  # through Python's own buffer: it keeps the file offset too
            stream.flush()
            stream.buffer.write(payload)
            stream.buffer.flush()
            return
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise OpfuseError(f"{path}: cannot write: {exc.strerror or exc}") from None


def write_file(path: str | Path, data: bytes | str,
               protect: Iterable[str | Path | None] = ()) -> None:
    """Write ``data`` (text is UTF-8) to ``path`` under the package's rules. Errors: OpfuseError."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if str(path) == STDOUT:
        sys.stdout.flush()
        sys.stdout.buffer.write(payload)
        sys.stdout.buffer.flush()
        return
    path = Path(path)
    check_output(path, protect)
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OpfuseError(f"{path}: is a folder, not a file name")
    dest, special = _link_chain(path)
    if special or (st is not None and not stat.S_ISREG(st.st_mode)):
        _write_into(path, payload)
        return
    with staging_folder(dest) as folder:
        tmp = folder / dest.name
        tmp.write_bytes(payload)
        commit_file(tmp, dest)


@contextmanager
def staging_folder(dest: Path) -> Iterator[Path]:
    """A temporary folder beside ``dest`` (same file system, so a rename moves a file out of it),
    removed afterwards with whatever is left in it. OSError becomes OpfuseError."""
    folder = dest.parent if str(dest.parent) else Path(".")
    if not folder.is_dir():
        raise OpfuseError(f"{dest}: folder '{folder}' does not exist")
    try:
        tmp = Path(tempfile.mkdtemp(dir=folder, prefix=f".{dest.name}.", suffix=".tmp"))
    except OSError as exc:
        raise OpfuseError(f"{dest}: cannot write: {exc.strerror}") from None
    try:
        yield tmp
    except OSError as exc:
        raise OpfuseError(f"{dest}: cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def commit_file(tmp: Path, dest: Path) -> None:
    """Move the finished ``tmp`` (in ``staging_folder(dest)``) over ``dest``: flushed to disk first,
    with the mode a plain ``open()`` would give a new file (the README's rule)."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fchmod(fd, umask_mode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, dest)
