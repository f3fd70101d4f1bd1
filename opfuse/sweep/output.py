"""Writing and reading sweep rows: Parquet (pyarrow), CSV or JSON, chosen by the output's
extension, written atomically (``opfuse.output``) and sorted by key, so equal rows give an equal
file. While a sweep runs, every finished row is appended to a JSON-lines file beside the output
(``.NAME.partial.jsonl``); a sweep that is killed leaves it, and ``--resume`` reads it back
with the output file itself to skip the rows already done (docs/architecture.md, "Sweep")."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from pathlib import Path

from opfuse.errors import OpfuseError
from opfuse.output import write_file
from opfuse.sweep.schema import COLUMNS, NAMES, TYPES, row_key, sort_rows

FORMATS = (".parquet", ".csv", ".json")
PYARROW_HINT = "Parquet output needs pyarrow: pip install 'opfuse[sweep]' (or write .csv / .json)"


def output_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise OpfuseError(f"{path}: the output's extension says its format: "
                          f"{', '.join(FORMATS)}")
    return suffix


def _pyarrow():  # noqa: ANN202
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise OpfuseError(PYARROW_HINT) from None
    return pa, pq


def arrow_schema():  # noqa: ANN201 (pyarrow.Schema)
    pa, _ = _pyarrow()
    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
             "bool": pa.bool_()}
    return pa.schema([pa.field(c.name, types[c.type]) for c in COLUMNS])


def to_arrow(rows: list[dict]):  # noqa: ANN201 (pyarrow.Table)
    """The rows as an Arrow table with the documented schema."""
    pa, _ = _pyarrow()
    return pa.Table.from_pylist(sort_rows(rows), schema=arrow_schema())


# a text cell a spreadsheet would run as a formula (a model file named "=HYPERLINK(...).onnx"):
# written behind a quote, as OWASP's CSV-injection advice has it, and read back without it
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _text_cell(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA) or value.startswith("'") else value


def _from_text_cell(value: str) -> str:
    return value[1:] if value.startswith("'") else value


def _csv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(NAMES)
    for row in rows:
        writer.writerow(["" if row[n] is None else
                         ("true" if row[n] else "false") if TYPES[n] == "bool" else
                         repr(row[n]) if TYPES[n] == "float64" else
                         _text_cell(row[n]) if TYPES[n] == "string" else row[n] for n in NAMES])
    return buf.getvalue()


def _from_csv(text: str) -> list[dict]:
    parse = {"string": _from_text_cell, "int64": int, "float64": float,
             "bool": lambda v: v == "true"}
    reader = csv.DictReader(io.StringIO(text))
    # an empty field is null: rows hold no empty texts (schema.blank_row)
    return [{n: None if raw.get(n, "") == "" else parse[TYPES[n]](raw[n]) for n in NAMES}
            for raw in reader]


def encode(rows: list[dict], fmt: str) -> bytes | str:
    rows = sort_rows(rows)
    if fmt == ".parquet":
        _, pq = _pyarrow()
        buf = io.BytesIO()
        pq.write_table(to_arrow(rows), buf)
        return buf.getvalue()
    if fmt == ".csv":
        return _csv_text(rows)
    return json.dumps(rows, indent=1) + "\n"


def write_rows(path: str | Path, rows: list[dict]) -> None:
    write_file(path, encode(rows, output_format(path)))


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a sweep file written by ``write_rows``; an unreadable one is an OpfuseError."""
    path = Path(path)
    fmt = output_format(path)
    try:
        if fmt == ".parquet":
            _, pq = _pyarrow()
            rows = pq.read_table(path).to_pylist()
        elif fmt == ".csv":
            rows = _from_csv(path.read_text(encoding="utf-8"))
        else:
            rows = json.loads(path.read_text(encoding="utf-8"))
    except OpfuseError:
        raise
    except Exception as exc:  # noqa: BLE001 (pyarrow, csv and json each raise their own)
        raise OpfuseError(f"{path}: not a sweep file opfuse can read ({type(exc).__name__})") \
            from None
    if not isinstance(rows, list) or any(not isinstance(r, dict) or set(r) != set(NAMES)
                                         for r in rows):
        raise OpfuseError(f"{path}: not a sweep file (its columns are not the sweep's)")
    return [{n: r[n] for n in NAMES} for r in rows]


def partial_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(f".{path.name}.partial.jsonl")


def read_partial(path: str | Path) -> list[dict]:
    """The rows a killed sweep appended; a last line cut short by the kill is dropped."""
    part = partial_path(path)
    if not part.is_file():
        return []
    rows = []
    for line in part.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and set(row) == set(NAMES):
            rows.append(row)
    return rows


def done_rows(path: str | Path) -> dict[tuple[str, ...], dict]:
    """The rows already in the output file and its partial file, by key."""
    path = Path(path)
    rows = read_rows(path) if path.is_file() else []
    return {row_key(r): r for r in [*rows, *read_partial(path)]}


def _open_partial(part: Path, output: str | Path, resume: bool):  # noqa: ANN202
    """The partial file for appending (``resume``) or anew: never through a symlink planted at its
    name (whose target would be truncated), never a FIFO or device (a FIFO would block the sweep):
    opened without following links or waiting, then checked to be a regular file."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(part, flags | (os.O_APPEND if resume else 0), 0o666)
    except OSError as exc:
        why = "is a symbolic link" if part.is_symlink() else (exc.strerror or str(exc))
        raise OpfuseError(f"{output}: cannot write its partial file {part.name}: {why}; "
                          "remove it") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OpfuseError(f"{output}: its partial file {part.name} is not a regular file; "
                          "remove it")
    if not resume:
        os.ftruncate(fd, 0)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


class PartialWriter:
    """Appends each finished row to the partial file at once (flushed), so a kill loses none."""

    def __init__(self, path: str | Path, resume: bool) -> None:
        self.path = partial_path(path)
        self.rows = 0
        self.resumed = resume
        if not self.path.parent.is_dir():
            raise OpfuseError(f"{path}: folder '{self.path.parent}' does not exist")
        self._fh = _open_partial(self.path, path, resume)

    def add(self, row: dict) -> None:
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        self.rows += 1

    def close(self, remove: bool) -> None:
        """Close; remove the file when asked, or when it holds nothing to resume from."""
        self._fh.close()
        if remove or (self.rows == 0 and not self.resumed):
            self.path.unlink(missing_ok=True)
