"""One output folder (``--emit c -o DIR``): staged whole beside DIR, moved into place only when
complete, and never over files opfuse did not write (docs/architecture.md, "Outputs and limits").

What opfuse wrote is recorded in the folder's manifest (a JSON object, ``model.json`` for the C
project) under ``files``. A later write into the same folder treats those names, and the build
products of its Makefile (``rebuilt`` patterns), as its own; anything else is the user's. Without
``force`` a user's file refuses the write; with it, opfuse's files are replaced and the user's
kept (unless a new file has the same name).

The move: DIR is renamed aside, the staged folder renamed to DIR, the old one removed; a failure
in between renames DIR back. Until that first rename, DIR is untouched, so an error or Ctrl-C
while generating or writing leaves it as it was.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from opfuse.errors import OpfuseError
from opfuse.output.files import check_output, umask_mode


def _recorded(outdir: Path, manifest: str | None, new: Collection[str]) -> set[str] | None:
    """The names opfuse wrote into ``outdir`` by its manifest, or None when it has none of ours.
    A manifest from before ``files`` was recorded counts the names this write makes."""
    if manifest is None:
        return None
    try:
        info = json.loads((outdir / manifest).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(info, dict) or "arena_bytes" not in info:
        return None  # a model.json, but not one of ours
    files = info.get("files")
    if isinstance(files, list) and all(isinstance(f, str) for f in files):
        return {*files, manifest}
    return {*new, manifest}


def _foreign(outdir: Path, manifest: str | None, files: Collection[str],
             rebuilt: Iterable[str]) -> list[str]:
    """Entries of an existing ``outdir`` that opfuse did not write, sorted."""
    ours = _recorded(outdir, manifest, files) or set()
    patterns = tuple(rebuilt) if ours else ()
    return sorted(
        name for name in os.listdir(outdir)
        if name not in ours and not any(fnmatch.fnmatchcase(name, p) for p in patterns)
    )


def _with_record(files: Mapping[str, str], manifest: str | None) -> dict[str, str]:
    """``files`` with the manifest's ``files`` list set to exactly what is written."""
    out = dict(files)
    if manifest is not None and manifest in out:
        info = json.loads(out[manifest])
        info["files"] = sorted(out)
        out[manifest] = json.dumps(info, indent=2) + "\n"
    return out


def _carry(src: Path, dst: Path) -> None:
    """A user's entry into the staged folder: hard links where the file system allows (no copy,
    same inode), else copies; symlinks stay symlinks."""
    def link_or_copy(a: str, b: str) -> None:
        try:
            os.link(a, b, follow_symlinks=False)
        except OSError:
            shutil.copy2(a, b, follow_symlinks=False)

    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)
    else:
        link_or_copy(str(src), str(dst))


def _swap(stage: Path, outdir: Path) -> None:
    if not outdir.exists():
        os.rename(stage, outdir)
        return
    aside = Path(tempfile.mkdtemp(dir=outdir.parent, prefix=f".{outdir.name}.", suffix=".old"))
    os.rmdir(aside)  # a fresh unused name: rename needs the destination absent (or empty)
    os.rename(outdir, aside)
    try:
        os.rename(stage, outdir)
    except BaseException:
        os.rename(aside, outdir)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _check_folder(outdir: Path, files: Collection[str], protect: Iterable) -> None:
    parent = outdir.parent if str(outdir.parent) else Path(".")
    if not parent.is_dir():
        raise OpfuseError(f"{outdir}: folder '{parent}' does not exist")
    if outdir.exists() and not outdir.is_dir():
        raise OpfuseError(f"{outdir}: exists and is not a folder")
    protect = tuple(protect)
    check_output(outdir, protect)
    for name in files:
        check_output(outdir / name, protect)


def write_tree(outdir: str | Path, files: Mapping[str, str], *, manifest: str | None = None,
               rebuilt: Iterable[str] = (), protect: Iterable[str | Path | None] = (),
               force: bool = False) -> None:
    """Write ``files`` (name -> UTF-8 text) as the folder ``outdir`` (see the module doc).
    ``manifest`` names the JSON file among ``files`` that records them. Errors: OpfuseError."""
    outdir = Path(outdir)
    if outdir.is_symlink():  # write the folder the link names; the link stays
        outdir = Path(os.path.realpath(outdir))
    protect = tuple(protect)
    _check_folder(outdir, files, protect)
    keep: list[str] = []
    if outdir.is_dir():
        foreign = _foreign(outdir, manifest, files, rebuilt)
        if foreign and not force:
            more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
            raise OpfuseError(
                f"{outdir}: holds '{foreign[0]}'{more}, which opfuse did not write; choose a new "
                "or empty folder, or pass --force to replace opfuse's files and keep the others"
            )
        keep = [name for name in foreign if name not in files]
    _stage_and_swap(outdir, _with_record(files, manifest), keep)


def _stage_and_swap(outdir: Path, files: Mapping[str, str], keep: list[str]) -> None:
    try:
        stage = Path(tempfile.mkdtemp(dir=outdir.parent, prefix=f".{outdir.name}.", suffix=".tmp"))
    except OSError as exc:
        raise OpfuseError(f"{outdir}: cannot write: {exc.strerror}") from None
    try:
        old = outdir.stat().st_mode if outdir.is_dir() else None
        stage.chmod(stat.S_IMODE(old) if old is not None else umask_mode(0o777))
        for name, text in files.items():
            (stage / name).write_text(text, encoding="utf-8")
        for name in keep:
            _carry(outdir / name, stage / name)
        _swap(stage, outdir)
    except OSError as exc:
        raise OpfuseError(f"{outdir}: cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
