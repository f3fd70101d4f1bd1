"""Arm Vela's own estimate of a ``.tflite``, read from the CSV files it writes (docs/architecture.md,
cost stage: Vela is a second cost model that ``analyze --compare vela`` sets beside ours).

Vela (``ethos-u-vela``) writes, into its ``--output-dir``:

- ``<network>_summary_<system config>.csv``: one row for the network: ``cycles_total``,
  ``inference_time`` (seconds), ``sram_memory_used`` (KiB, Vela's "Total SRAM used"),
  ``passes_after_fusing`` (NPU operations), the encoded weight bytes...;
- ``<network>_per-layer.csv`` (with ``--verbose-performance``): one row per NPU operation Vela
  emitted, in schedule order. ``Name`` is the output tensor of the TFLite operator the row comes
  from (``Original Operator``), so a TFLite op that Vela lowers into several NPU operations (SOFTMAX
  becomes about 27 elementwise ones) has several rows, and a fused activation is a row of 0 cycles.
  ``Op Cycles`` is the op's estimate (the largest of its NPU and memory-access cycles), ``Staging
  Usage`` the SRAM bytes live at that op.

Only the columns used here are read; a file without them raises OpfuseError naming the file.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from opfuse.errors import OpfuseError

_SUMMARY_COLUMNS = ("network", "accelerator_configuration", "system_config", "memory_mode",
                    "core_clock", "inference_time", "cycles_total", "sram_memory_used",
                    "passes_after_fusing", "total_npu_encoded_weights")
_LAYER_COLUMNS = ("Original Operator", "NNG Operator", "Target", "Staging Usage", "Op Cycles",
                  "MAC Count", "Name")


@dataclass(frozen=True)
class VelaSummary:
    network: str
    accelerator: str  # e.g. Ethos_U55_128
    system_config: str
    memory_mode: str
    clock_hz: float
    inference_s: float
    cycles: int
    sram_bytes: int  # "Total SRAM used" (the summary gives KiB)
    passes: int  # NPU operations after Vela's fusing
    encoded_weight_bytes: int

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class VelaLayer:
    """One TFLite operator as Vela scheduled it: the rows of the per-layer CSV that share its name."""

    name: str  # the TFLite operator's output tensor
    operator: str  # Vela's name of the TFLite operator (Conv2D, DepthwiseConv2D, Softmax...)
    npu_ops: tuple[str, ...]  # Vela's NPU operations for it, fused activations included
    on_npu: bool
    cycles: int
    macs: int
    staging_bytes: int  # the most SRAM live at any of its NPU operations

    @property
    def passes(self) -> int:
        """NPU operations that cost cycles (a fused activation is part of its producer's)."""
        return len(self.npu_ops) - self.fused

    @property
    def fused(self) -> int:
        return sum(1 for op in self.npu_ops if op in _FUSED_ACTIVATIONS)

    def to_json(self) -> dict:
        return {"name": self.name, "operator": self.operator, "npu_ops": list(self.npu_ops),
                "on_npu": self.on_npu, "cycles": self.cycles, "macs": self.macs,
                "staging_bytes": self.staging_bytes, "passes": self.passes}


# Vela's names of the activations it fuses into the producing NPU operation (0 cycles of their own).
_FUSED_ACTIVATIONS = frozenset({"Relu", "Relu6", "ReluN1To1", "Relu0To1", "Clamp"})


@dataclass(frozen=True)
class VelaRun:
    summary: VelaSummary
    layers: tuple[VelaLayer, ...]
    command: tuple[str, ...] = ()


def _rows(path: Path, need: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in need if c not in (reader.fieldnames or [])]
            if missing:
                raise OpfuseError(f"{path}: not a Vela CSV (no column '{missing[0]}')")
            return list(reader)
    except OSError as exc:
        raise OpfuseError(f"{path}: cannot read Vela output ({exc.strerror})") from exc


def _num(row: dict[str, str], key: str, path: Path) -> float:
    try:
        return float(row[key])
    except (TypeError, ValueError) as exc:
        raise OpfuseError(f"{path}: column '{key}' is not a number: {row.get(key)!r}") from exc


def parse_summary(path: str | Path) -> VelaSummary:
    path = Path(path)
    rows = _rows(path, _SUMMARY_COLUMNS)
    if not rows:
        raise OpfuseError(f"{path}: Vela summary has no row")
    r = rows[0]
    return VelaSummary(
        network=r["network"],
        accelerator=r["accelerator_configuration"],
        system_config=r["system_config"],
        memory_mode=r["memory_mode"],
        clock_hz=_num(r, "core_clock", path),
        inference_s=_num(r, "inference_time", path),
        cycles=int(_num(r, "cycles_total", path)),
        sram_bytes=round(_num(r, "sram_memory_used", path) * 1024),
        passes=int(_num(r, "passes_after_fusing", path)),
        encoded_weight_bytes=int(_num(r, "total_npu_encoded_weights", path)),
    )


def parse_per_layer(path: str | Path) -> tuple[VelaLayer, ...]:
    """The per-layer CSV grouped by TFLite operator (consecutive rows with one ``Name``)."""
    path = Path(path)
    groups: list[list[dict[str, str]]] = []
    for row in _rows(path, _LAYER_COLUMNS):
        if groups and groups[-1][0]["Name"] == row["Name"]:
            groups[-1].append(row)
        else:
            groups.append([row])
    return tuple(
        VelaLayer(
            name=g[0]["Name"],
            operator=g[0]["Original Operator"],
            npu_ops=tuple(r["NNG Operator"] for r in g),
            on_npu=all(r["Target"] == "NPU" for r in g),
            cycles=int(sum(_num(r, "Op Cycles", path) for r in g)),
            macs=int(sum(_num(r, "MAC Count", path) for r in g)),
            staging_bytes=int(max(_num(r, "Staging Usage", path) for r in g)),
        )
        for g in groups
    )


def read_output_dir(directory: str | Path, network: str) -> VelaRun:
    """The summary and per-layer CSV Vela wrote for ``network`` into ``directory``."""
    directory = Path(directory)
    summaries = sorted(directory.glob(f"{network}_summary_*.csv"))
    if not summaries:
        raise OpfuseError(f"{directory}: Vela wrote no summary CSV for '{network}'")
    layers = directory / f"{network}_per-layer.csv"
    return VelaRun(parse_summary(summaries[0]),
                   parse_per_layer(layers) if layers.exists() else ())
