"""Write a model atomically: a temporary file in the destination folder, then ``os.replace``.

A failed write leaves neither a partial model nor the temporary file; the input model is never
overwritten. Models over protobuf's 2 GB limit are written with their weights in one external data
file beside the model (``NAME.onnx.data``), written the same way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx

from opfuse.atomic import write_atomic
from opfuse.errors import OpfuseError

_PROTO_LIMIT = 2**31 - 1


def save_model(
    proto: onnx.ModelProto, path: str | Path, *, protect: str | Path | None = None
) -> None:
    """Write ``proto`` to ``path``; refuse when ``path`` is the file ``protect`` (the input model)."""
    path = Path(path)
    if protect is not None and _same_file(path, Path(protect)):
        raise OpfuseError(f"{path}: refusing to overwrite the input model; choose another -o path")
    folder = path.parent
    if not folder.is_dir():
        raise OpfuseError(f"{path}: folder '{folder}' does not exist")
    if path.is_dir():
        raise OpfuseError(f"{path}: is a folder, not a file name")
    if proto.ByteSize() > _PROTO_LIMIT:
        _save_external(proto, path)
        return
    write_atomic(path, proto.SerializeToString())


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()



def _save_external(proto: onnx.ModelProto, path: Path) -> None:
    """Weights to ``NAME.onnx.data`` beside the model, both files via temporary names."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    data_name = f"{path.name}.data"
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmpdir:
        tmp_model = Path(tmpdir) / path.name
        try:
            onnx.save_model(
                copy,
                str(tmp_model),
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=data_name,
                size_threshold=1024,
            )
            if (Path(tmpdir) / data_name).exists():  # absent when no tensor is over 1 KB
                os.replace(Path(tmpdir) / data_name, path.parent / data_name)
            os.replace(tmp_model, path)
        except OSError as exc:
            raise OpfuseError(f"{path}: cannot write: {exc.strerror or exc}") from None
