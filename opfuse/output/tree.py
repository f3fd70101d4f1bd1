"""One output folder (``--emit c -o DIR``): staged whole beside DIR, moved into place only when
complete, and never over files opfuse did not write (docs/architecture.md, "Outputs and limits").

What opfuse wrote is recorded in the folder's manifest (a JSON object, ``model.json`` for the C
project) under ``files``, with the SHA-256 of each under ``file_sha256``. A later write into the
same folder treats as its own a recorded file whose content still has its recorded hash, and then
the build products of its Makefile (``rebuilt`` patterns); anything else is the user's. So a
manifest planted in a folder (or one from before the hashes) cannot make opfuse delete a file it
did not write: without hashes that match, the only names taken as opfuse's are those this write
replaces, and nothing is removed as stale. Without
``force`` a user's file refuses the write; with it, opfuse's files are replaced and the user's
kept (unless a new file has the same name).

The move: a new DIR is the staged folder, renamed. Into an existing DIR each staged file is renamed
over its namesake after every old one was hard-linked aside, and opfuse's stale files removed; a
failure or Ctrl-C on the way puts every old file back. Until then DIR is untouched, so an error
while generating or writing leaves it as it was.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from opfuse.errors import OpfuseError
from opfuse.output.files import check_output, umask_mode


def _sha256(path: Path) -> str | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _recorded(outdir: Path, manifest: str | None,
              new: Collection[str]) -> tuple[set[str], bool] | None:
    """(the names opfuse wrote into ``outdir`` by its manifest, whether the manifest proved them:
    every name's content has its recorded hash), or None when the folder has no manifest of ours.
    An unproved manifest (planted, or from before the hashes) counts only the names this write
    replaces."""
    if manifest is None:
        return None
    try:
        info = json.loads((outdir / manifest).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(info, dict) or "arena_bytes" not in info:
        return None  # a model.json, but not one of ours
    files, hashes = info.get("files"), info.get("file_sha256")
    if (isinstance(files, list) and isinstance(hashes, dict)
            and all(isinstance(f, str) and f == os.path.basename(f) for f in files)):
        proved = {f for f in files if f != manifest and isinstance(hashes.get(f), str)
                  and _sha256(outdir / f) == hashes[f]}
        if proved:
            return {*proved, manifest}, True
    return {*new, manifest}, False


def _foreign(outdir: Path, manifest: str | None, files: Collection[str],
             rebuilt: Iterable[str]) -> list[str]:
    """Entries of an existing ``outdir`` that opfuse did not write, sorted."""
    ours, proved = _recorded(outdir, manifest, files) or (set(), False)
    patterns = tuple(rebuilt) if proved else ()
    return sorted(
        name for name in os.listdir(outdir)
        if name not in ours and not any(fnmatch.fnmatchcase(name, p) for p in patterns)
    )


def _raw(content: str | bytes) -> bytes:
    return content if isinstance(content, bytes) else content.encode("utf-8")


def _with_record(files: Mapping[str, str | bytes], manifest: str | None
                 ) -> dict[str, str | bytes]:
    """``files`` with the manifest's ``files`` list set to exactly what is written, and the
    SHA-256 of each other file's bytes (a text's UTF-8) under ``file_sha256``."""
    out = dict(files)
    if manifest is not None and manifest in out:
        info = json.loads(out[manifest])
        info["files"] = sorted(out)
        info["file_sha256"] = {name: hashlib.sha256(_raw(text)).hexdigest()
                               for name, text in sorted(out.items()) if name != manifest}
        out[manifest] = json.dumps(info, indent=2) + "\n"
    return out


def _install(stage: Path, outdir: Path, names: list[str], drop: list[str]) -> None:
    """Move the staged ``names`` into the existing ``outdir`` and remove ``drop``, each by one
    rename; first every old file is hard-linked into ``stage/.old``, so any failure (or Ctrl-C)
    puts back each old file, same inode, and removes each new one. ``outdir`` itself stays (a
    shell whose working folder it is keeps it)."""
    old = stage / ".old"
    old.mkdir()
    for name in (*names, *drop):
        if (outdir / name).exists() or (outdir / name).is_symlink():
            _link_or_copy(outdir / name, old / name)
    done: list[str] = []
    try:
        for name in names:
            os.replace(stage / name, outdir / name)
            done.append(name)
        for name in drop:
            os.unlink(outdir / name)
            done.append(name)
    except BaseException:
        for name in reversed(done):
            if (old / name).exists() or (old / name).is_symlink():
                os.replace(old / name, outdir / name)
            else:
                os.unlink(outdir / name)
        raise


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst, follow_symlinks=False)


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


def write_tree(outdir: str | Path, files: Mapping[str, str | bytes], *,
               manifest: str | None = None,
               rebuilt: Iterable[str] = (), protect: Iterable[str | Path | None] = (),
               force: bool = False) -> None:
    """Write ``files`` (name -> UTF-8 text, or bytes) as the folder ``outdir`` (see the module doc).
    ``manifest`` names the JSON file among ``files`` that records them. Errors: OpfuseError."""
    outdir = Path(os.path.abspath(outdir))
    if outdir.is_symlink():  # write the folder the link names; the link stays
        outdir = Path(os.path.realpath(outdir))
    protect = tuple(protect)
    _check_folder(outdir, files, protect)
    drop: list[str] = []
    if outdir.is_dir():
        foreign = _foreign(outdir, manifest, files, rebuilt)
        if foreign and not force:
            more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
            raise OpfuseError(
                f"{outdir}: holds '{foreign[0]}'{more}, which opfuse did not write; choose a new "
                "or empty folder, or pass --force to replace opfuse's files and keep the others"
            )
        drop = sorted(set(os.listdir(outdir)) - set(foreign) - set(files))  # ours, now stale
    _stage_and_install(outdir, _with_record(files, manifest), drop)


def _stage_and_install(outdir: Path, files: Mapping[str, str | bytes], drop: list[str]) -> None:
    try:
        stage = Path(tempfile.mkdtemp(dir=outdir.parent, prefix=f".{outdir.name}.", suffix=".tmp"))
    except OSError as exc:
        raise OpfuseError(f"{outdir}: cannot write: {exc.strerror}") from None
    try:
        for name, text in files.items():
            if isinstance(text, bytes):
                (stage / name).write_bytes(text)
            else:
                (stage / name).write_text(text, encoding="utf-8")
        if outdir.is_dir():
            _install(stage, outdir, list(files), drop)
        else:
            stage.chmod(umask_mode(0o777))  # mkdtemp's 0700 would become the folder's mode
            os.rename(stage, outdir)
    except OSError as exc:
        raise OpfuseError(f"{outdir}: cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
