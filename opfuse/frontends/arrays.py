"""Named arrays a user gives (``--inputs FILE.npz``, calibration data): read without pickles, and
bounded before anything is decompressed.

An ``.npz`` is a zip of ``.npy`` members; a few compressed megabytes can declare gigabytes. Each
member's uncompressed size (the zip directory's, which bounds what decompression may produce) is
held to the ``activation`` limit, and so is their sum, before any member is read
(docs/commands.md, "Size limits")."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from opfuse.errors import OpfuseError
from opfuse.frontends.limits import refuse


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Named arrays from an .npz file (no pickles), each and all bounded by the activation limit."""
    try:
        with zipfile.ZipFile(path) as archive:
            sizes = {info.filename: info.file_size for info in archive.infolist()}
    except FileNotFoundError:
        raise OpfuseError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise OpfuseError(f"{path}: not a readable .npz file: {_first_line(exc)}") from None
    for member, size in sizes.items():
        refuse(f"{path}: member '{member}' decompressed", size, "activation")
    refuse(f"{path}: all members decompressed", sum(sizes.values()), "activation")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as exc:  # noqa: BLE001 (numpy raises many kinds on a bad file)
        raise OpfuseError(f"{path}: not a readable .npz file: {_first_line(exc)}") from None
