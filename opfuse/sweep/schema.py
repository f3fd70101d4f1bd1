"""The sweep's row: one flat record per (model, target, precision, options), its columns typed
once here. The README's row-schema table, the Parquet schema and the CSV reader all come from
``COLUMNS`` (docs/architecture.md, "Sweep").

Rows are deterministic: no timestamps, no wall times, no temporary paths, so a local run, a Ray run
and a resumed run give equal rows, and the final file is sorted by ``KEY``.
"""

from __future__ import annotations

from dataclasses import dataclass

STATUSES = ("ok", "skipped", "error")
PRECISIONS = ("fp32", "fp16", "int8")
# what a row's identity is: the same model bytes, target, precision and options are the same row
KEY = ("model", "model_sha256", "target", "precision", "options")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # "string", "int64", "float64" or "bool"
    meaning: str


COLUMNS: tuple[Column, ...] = (
    Column("model", "string", "the model as given: a file path, or a built-in name"),
    Column("model_sha256", "string", "SHA-256 of the model file's bytes (a built-in: of "
           "'builtin:NAME:VERSION')"),
    Column("model_format", "string", "onnx, tflite or builtin"),
    Column("target", "string", "target name"),
    Column("target_sha256", "string", "SHA-256 of the target's TOML file"),
    Column("precision", "string", "the precision asked: fp32, fp16 or int8"),
    Column("options", "string", "the options that change figures (emulate=0|1, then "
           ";input_shape=NAME=DIMS and ;input_value=NAME=VALUE per binding, and on an int8 row "
           ";calibration=SHA256 of the data's arrays, first 16 hex digits)"),
    Column("opfuse_version", "string", "the opfuse that computed the row"),
    Column("status", "string", "ok, skipped (precision not applicable: see precision_note) or "
           "error"),
    Column("error", "string", "the one-line error of a failed row, else null"),
    Column("precision_used", "string", "the precision the figures are costed at"),
    Column("precision_note", "string", "why precision_used differs from the model's own (a "
           "what-if), or why the row is skipped; null when it is the model's own"),
    Column("calibration", "string", "--calibration: the data the int8 row of a float model was "
           "quantized with (a real int8 build, opfuse quantize minmax per channel), null for a "
           "what-if"),
    Column("int8_sqnr_db", "float64", "--calibration: the int8 build's lowest output SQNR (dB) "
           "against the float model on the held-out quarter of the data"),
    Column("kernels_before", "int64", "kernels before fusion (one per imported node)"),
    Column("kernels_after", "int64", "kernels after fusion"),
    Column("traffic_before_bytes", "int64", "memory traffic before fusion"),
    Column("traffic_after_bytes", "int64", "memory traffic after fusion"),
    Column("macs", "int64", "multiply-accumulates after fusion"),
    Column("peak_arena_bytes", "int64", "the planned activation arena after fusion (cascades "
           "included where the target has them)"),
    Column("layer_by_layer_bound_bytes", "int64", "the layer-by-layer lower bound of the arena"),
    Column("weight_bytes", "int64", "distinct weights stored (flash)"),
    Column("ram_bytes", "int64", "the target's RAM for the arena"),
    Column("fits_ram", "bool", "peak_arena_bytes <= ram_bytes"),
    Column("ram_margin_bytes", "int64", "ram_bytes - peak_arena_bytes (negative: the overage)"),
    Column("flash_bytes", "int64", "the target's flash, null when its file does not say"),
    Column("fits_flash", "bool", "weight_bytes <= flash_bytes, null when flash is unknown"),
    Column("flash_margin_bytes", "int64", "flash_bytes - weight_bytes (negative: the overage)"),
    Column("latency_before_s", "float64", "predicted latency before fusion"),
    Column("latency_s", "float64", "predicted latency after fusion (roofline + dispatch)"),
    Column("energy_j", "float64", "predicted energy after fusion"),
    Column("bound", "string", "where the time goes after fusion: compute or memory"),
    Column("unknown_sizes", "bool", "some tensors have no known size: totals are lower bounds"),
    Column("refused_edges", "int64", "producer -> consumer edges left unfused"),
    Column("top_refusals", "string", "the three refusal groups worth acting on first, "
           "'Producer->Consumer reason xN' joined by '; ' (null: none refused)"),
    Column("emu_verdict", "string", "--emulate: bit-exact, within tolerance, mismatch, error or "
           "not run; null without --emulate"),
    Column("emu_note", "string", "--emulate: why it was not run, or its error (null: it ran)"),
    Column("emu_instructions", "int64", "--emulate: instructions of one inference (QEMU "
           "-icount, not cycles)"),
    Column("emu_flash_bytes", "int64", "--emulate: the ELF's flash (code + weights + constants "
           "+ .data)"),
    Column("emu_ram_bytes", "int64", "--emulate: the ELF's RAM (arena + stack + other data)"),
    Column("emu_arena_bytes", "int64", "--emulate: the ELF's arena"),
    Column("emu_max_abs_err", "float64", "--emulate: the largest output difference from the "
           "reference"),
)

NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
TYPES: dict[str, str] = {c.name: c.type for c in COLUMNS}


def blank_row(**values: object) -> dict:
    """A row with every column, null where ``values`` does not say; an empty text is null too
    (CSV cannot tell the two apart, and every format must read back the same row)."""
    unknown = set(values) - set(NAMES)
    if unknown:
        raise KeyError(f"not sweep columns: {sorted(unknown)}")
    return {name: None if values.get(name) == "" else values.get(name) for name in NAMES}


def row_key(row: dict) -> tuple[str, ...]:
    return tuple(str(row[k]) for k in KEY)


def sort_rows(rows: list[dict]) -> list[dict]:
    """Rows in the final file's order: by key, precisions in PRECISIONS order."""
    def order(row: dict) -> tuple:
        prec = row["precision"]
        rank = PRECISIONS.index(prec) if prec in PRECISIONS else len(PRECISIONS)
        return (row["model"], row["model_sha256"], row["target"], rank, prec, row["options"])

    return sorted(rows, key=order)
