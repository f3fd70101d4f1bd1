"""One sweep task: a model's bytes and a target's TOML, the precisions asked and the options, in;
one flat row per precision out (``opfuse.sweep.schema``). The model is compiled once per task and
analyzed at each precision; with ``emulate`` the C is also built and run in QEMU where the C
backend builds that precision. Everything it needs travels in the task, so the same function
runs in a local worker process or a Ray worker (docs/architecture.md, "Sweep").

Precision rows (decided here, documented in the README):
- a float model at fp32/fp16/int8: analyze's what-if at that precision (``precision_note`` says
  so); skipped where the target does not run that precision;
- with ``--calibration DATA``, a float model's int8 row is a real int8 build instead: the model
  quantized with DATA (opfuse quantize, minmax, per channel) and compiled, costed at its own
  dtypes, with its SQNR against the float model; its ``options`` name the data's hash, so
  ``--resume`` keeps it apart from a what-if row;
- a quantized model is costed at its own dtypes whatever is asked, so only its own precision's row
  has figures; the others are skipped and say why;
- ``--emulate`` runs the C the backend builds: float32 for a float model (its fp32 row, and the
  int8 build of its calibrated int8 row), the model's integers for a quantized one (its own row),
  on targets with an emulated board.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from opfuse import __version__
from opfuse.errors import OpfuseError
from opfuse.sweep.inputs import CalibrationRef, ModelRef, TargetRef
from opfuse.sweep.schema import blank_row

MAX_ERROR_CHARS = 400


@dataclass(frozen=True)
class Task:
    model: ModelRef
    target: TargetRef
    precisions: tuple[str, ...]
    emulate: bool = False
    timeout_s: float = 300.0
    input_shape: tuple[str, ...] = ()  # --input-shape NAME=DIMS, bound in every model
    calibration: CalibrationRef | None = None  # --calibration: int8 rows are real int8 builds
    input_value: tuple[str, ...] = ()  # --input-value NAME=VALUE, bound in every model

    def options(self, precision: str) -> str:
        """What else the row depends on (a --resume key): a row bound to other shapes is another,
        and an int8 row quantized with some data is not the what-if."""
        shapes = "".join(f";input_shape={s}" for s in self.input_shape)
        shapes += "".join(f";input_value={s}" for s in self.input_value)
        data = self.calibration.option if self.calibration and precision == "int8" else ""
        return f"emulate={int(self.emulate)}{shapes}{data}"


def one_line(text: str, replace: dict[str, str] | None = None) -> str:
    """A message as one printable line: temporary paths replaced by what the user named, line
    breaks as ' / ', other control characters escaped, at most MAX_ERROR_CHARS."""
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    text = " / ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _message(exc: BaseException, replace: dict[str, str]) -> str:
    if isinstance(exc, OpfuseError):
        return one_line(str(exc), replace)
    return one_line(f"internal error: {type(exc).__name__}: {exc}", replace)


def run_task(task: Task) -> tuple[dict, ...]:
    """The rows of ``task``, one per precision; never raises for a bad model or target."""
    with tempfile.TemporaryDirectory(prefix="opfuse-sweep-") as tmp:
        return _run_in(task, Path(tmp))


def _run_in(task: Task, tmp: Path) -> tuple[dict, ...]:
    from opfuse import api

    model, tref = task.model, task.target
    common = {"model": model.name, "model_sha256": model.sha256, "model_format": model.format,
              "target": tref.name, "target_sha256": tref.sha256, "opfuse_version": __version__}

    def base(p: str) -> dict:
        return {**common, "options": task.options(p)}

    def failed(message: str) -> tuple[dict, ...]:
        return tuple(blank_row(**base(p), precision=p, status="error", error=message)
                     for p in task.precisions)

    if model.error is not None:
        return failed(one_line(model.error))
    target_path = tmp / "target.toml"
    target_path.write_bytes(tref.toml)
    if model.data is None:
        source = model.name
    else:
        source = str(tmp / f"model.{model.format}")
        Path(source).write_bytes(model.data)
    replace = {source: model.name, str(target_path): tref.name}
    cal_path = None
    if task.calibration is not None and "int8" in task.precisions:
        cal_path = tmp / "calibration.npz"
        cal_path.write_bytes(task.calibration.npz)
        replace[str(cal_path)] = task.calibration.name
    replace[str(tmp)] = "<sweep>"
    try:
        target = api.get_target(str(target_path))
        result = api.compile(source, target=target, input_shape=task.input_shape or None,
                             input_value=task.input_value or None)
    except Exception as exc:  # noqa: BLE001 (any failure is this model's row, not the sweep's)
        return failed(_message(exc, replace))
    from opfuse.sweep.figures import emulation_figures, precision_row
    from opfuse.sweep.int8_build import Int8Build, int8_row

    rows = []
    built: Int8Build | None = None
    for prec in task.precisions:
        try:
            if prec == "int8" and cal_path is not None:
                row, built = int8_row(result, cal_path, task.calibration.name, base(prec), tmp)
            else:
                row = precision_row(result, prec, base(prec))
        except Exception as exc:  # noqa: BLE001
            row = blank_row(**base(prec), precision=prec, status="error",
                            error=_message(exc, replace))
        rows.append(row)
    if task.emulate:
        rows = emulation_figures(source, target, result, rows, task.timeout_s,
                                 lambda exc: _message(exc, replace), task.input_shape,
                                 task.input_value,
                                 int8_source=None if built is None else str(built.path))
    return tuple(rows)
