"""A float model's int8 row as a real int8 build (``sweep --calibration DATA``): the model
quantized with DATA as ``opfuse quantize`` does (minmax, per channel, the last quarter held out
for the accuracy), the QDQ model compiled for the row's target and costed at its own dtypes, with
the lowest output SQNR against the float model (docs/sweep.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from opfuse.sweep.figures import own_precision, precision_row


@dataclass(frozen=True)
class Int8Build:
    path: Path  # the QDQ model, in the task's temporary folder (--emulate builds its C)
    result: object  # its CompileResult


def lowest_sqnr(outputs: list[dict]) -> float | None:
    """The lowest output SQNR in dB; None when every output is exact."""
    values = []
    for o in outputs:
        db = o["sqnr_db"]
        if db is not None:
            values.append(-math.inf if isinstance(db, str) else float(db))
    return min(values) if values else None


def int8_row(result, data: Path, data_name: str, base: dict,  # noqa: ANN001 (CompileResult)
             tmp: Path) -> tuple[dict, Int8Build | None]:
    """The int8 row of ``result``: a real build when the model is float, else its own row."""
    import onnx

    from opfuse import api

    quantized, _ = own_precision(result)
    if not quantized and "int8" not in result.target.precisions:
        return precision_row(result, "int8", base), None  # skipped, and says why
    if quantized:  # a quantized model's own row; the data is not used
        row = precision_row(result, "int8", base)
        note = "already quantized: --calibration not used"
        return row | {"precision_note": f"{row['precision_note']}; {note}"
                      if row["precision_note"] else note}, None
    done = api.quantize(result, str(data))
    path = tmp / "model.int8.onnx"
    onnx.save(done.proto, path)
    built = api.compile(str(path), target=result.target)
    row = precision_row(built, "int8", base)
    sqnr = lowest_sqnr(done.accuracy.outputs)
    return row | {
        "calibration": data_name,
        "int8_sqnr_db": None if sqnr is None or not math.isfinite(sqnr) else round(sqnr, 3),
        "precision_note": f"a real int8 build: quantized with {data_name} ({done.method}, "
                          f"weights per channel, {done.calibration.count} samples), SQNR over "
                          f"{done.evaluation.count} held-out",
    }, Int8Build(path, built)
