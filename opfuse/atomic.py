"""Every file opfuse writes goes through here: a temporary file in the destination folder, then a
rename, so a failed write leaves neither a partial file nor the temporary one. The file gets the mode
``open()`` would give it (0666 less the umask: 0644 under umask 022), not mkstemp's 0600."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from opfuse.errors import OpfuseError


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


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` (text is UTF-8) to ``path``; the folder must exist. Errors: OpfuseError."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise OpfuseError(f"{path}: folder '{folder}' does not exist")
    if path.is_dir():
        raise OpfuseError(f"{path}: is a folder, not a file name")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OpfuseError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OpfuseError(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise
