"""Write a model by opfuse/output's rules (docs/architecture.md, "Outputs and limits"): never over
the input model, a regular file replaced by rename so a failed write leaves neither a partial model
nor the temporary file, a FIFO or device written into. Models over protobuf's 2 GB limit are written
with their weights in one external data file beside the model (``NAME.onnx.data``), both staged in
one temporary folder and renamed into place (onnx writes the split).
"""

from __future__ import annotations

from pathlib import Path

import onnx

from opfuse.errors import OpfuseError
from opfuse.output import check_output, commit_file, staging_folder, write_file

_PROTO_LIMIT = 2**31 - 1


def save_model(
    proto: onnx.ModelProto, path: str | Path, *, protect: str | Path | None = None
) -> None:
    """Write ``proto`` to ``path`` (``-`` is standard output); refuse when ``path`` is the file
    ``protect`` (the input model) or links to it."""
    check_output(path, (protect,))
    if proto.ByteSize() > _PROTO_LIMIT:
        _save_external(proto, Path(path), protect)
        return
    write_file(path, proto.SerializeToString(), protect=(protect,))


def _save_external(proto: onnx.ModelProto, path: Path, protect: str | Path | None) -> None:
    """Weights to ``NAME.onnx.data`` beside the model: a regular file of its own, by name."""
    if str(path) == "-" or (path.exists() and not path.is_file()):
        raise OpfuseError(f"{path}: a model over 2 GB is written as two files; give a file name")
    data_path = path.parent / f"{path.name}.data"
    check_output(data_path, (protect,))
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    with staging_folder(path) as tmpdir:
        tmp_model = tmpdir / path.name
        onnx.save_model(
            copy,
            str(tmp_model),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data_path.name,
            size_threshold=1024,
        )
        if (tmpdir / data_path.name).exists():  # absent when no tensor is over 1 KB
            commit_file(tmpdir / data_path.name, data_path)
        commit_file(tmp_model, path)
