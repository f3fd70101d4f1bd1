"""What a sweep runs over: each MODEL argument (a file, a folder of .onnx/.tflite, or a built-in
name) as a ``ModelRef`` holding the file's bytes, and each target as a ``TargetRef`` holding its
TOML bytes, so a task carries everything it needs and a Ray worker never reads a local path
(docs/architecture.md, "Sweep")."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from opfuse import __version__
from opfuse.errors import OpfuseError

SUFFIXES = (".onnx", ".tflite")


@dataclass(frozen=True)
class ModelRef:
    name: str  # as the user gave it (a path or a built-in name): the row's ``model``
    format: str  # onnx, tflite or builtin
    sha256: str
    data: bytes | None = None  # the file's bytes; None for a built-in
    error: str | None = None  # a file that cannot be read: its rows are error rows


@dataclass(frozen=True)
class TargetRef:
    name: str
    sha256: str
    toml: bytes
    precisions: tuple[str, ...]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def builtin_names() -> tuple[str, ...]:
    from opfuse import models

    return tuple(models.MODELS)


def _file_ref(path: Path, name: str) -> ModelRef:
    fmt = path.suffix.lower().lstrip(".")
    try:
        data = path.read_bytes()
    except OSError as exc:
        return ModelRef(name, fmt, _digest(name.encode()), None, f"{name}: cannot read: "
                        f"{exc.strerror or exc}")
    return ModelRef(name, fmt, _digest(data), data)


def model_refs(args: list[str] | tuple[str, ...]) -> list[ModelRef]:
    """Every model the arguments name, in order, each once. A folder gives its .onnx/.tflite
    files (recursively, sorted); a name that is neither a file, a folder nor a built-in is an
    OpfuseError (nothing to sweep is a usage mistake, not a row)."""
    refs: dict[str, ModelRef] = {}
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUFFIXES
                           and p.is_file())
            if not found:
                raise OpfuseError(f"{arg}: a folder with no .onnx or .tflite file")
            for p in found:
                refs.setdefault(str(p), _file_ref(p, str(p)))
        elif path.is_file():
            refs.setdefault(arg, _file_ref(path, arg))
        elif arg in builtin_names():
            refs.setdefault(arg, ModelRef(arg, "builtin",
                                          _digest(f"builtin:{arg}:{__version__}".encode())))
        else:
            raise OpfuseError(f"{arg}: no such file or folder, and not a built-in model name "
                              f"(built-ins: {', '.join(builtin_names())})")
    return list(refs.values())


def target_refs(spec: str) -> list[TargetRef]:
    """``all`` or a comma-separated list of names (or .toml files), each with its file's bytes."""
    from opfuse.targets import list_targets, load_target, target_file

    names = list_targets() if spec.strip() == "all" else [
        s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise OpfuseError("--targets: no target named")
    out: dict[str, TargetRef] = {}
    for name in names:
        target = load_target(name)  # one line naming an unknown target
        toml = target_file(name).read_bytes()
        out.setdefault(target.name, TargetRef(target.name, _digest(toml), toml, target.precisions))
    return list(out.values())


def parse_precisions(spec: str) -> tuple[str, ...]:
    from opfuse.sweep.schema import PRECISIONS

    asked = tuple(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    bad = [p for p in asked if p not in PRECISIONS]
    if bad or not asked:
        raise OpfuseError(f"--precisions: unknown precision '{(bad or [''])[0]}' "
                          f"(choose from {', '.join(PRECISIONS)})")
    return asked


@dataclass(frozen=True)
class CalibrationRef:
    """``--calibration DATA``: its arrays as .npz bytes (a folder of .npy too), so a task carries
    them to any worker; ``sha256`` hashes the arrays (names, dtypes, shapes, values)."""

    name: str  # as the user gave it
    sha256: str
    npz: bytes

    @property
    def option(self) -> str:
        """What an int8 row's ``options`` adds: the data is part of the row's identity."""
        return f";calibration={self.sha256[:16]}"


def calibration_ref(path: str) -> CalibrationRef:
    """DATA read and checked as far as no model is needed (readable, float, finite); shapes and
    sample counts are each model's to check (a mismatch is that model's int8 error row)."""
    import io

    import numpy as np

    from opfuse.quantize.data import read_arrays

    arrays = read_arrays(path)
    if not arrays:
        raise OpfuseError(f"{path}: holds no arrays")
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        if a.dtype.kind != "f":
            raise OpfuseError(f"{path}: input '{name}' is {a.dtype}, calibration data must be "
                              "float")
        if not np.isfinite(a).all():
            bad = "NaN" if np.isnan(a).any() else "infinity"
            raise OpfuseError(f"{path}: input '{name}' holds {bad} (first at sample "
                              f"{np.argwhere(~np.isfinite(a))[0][0]})")
        digest.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return CalibrationRef(path, digest.hexdigest(), buf.getvalue())
