"""`opfuse analyze --compare vela` in the terminal: our estimate beside Vela's, per layer and in
total (the figures come from ``opfuse.cost.compare``; this module only lays them out)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from opfuse.report.console import cell, stdout_console
from opfuse.report.units import fmt_bytes, fmt_time

if TYPE_CHECKING:
    from opfuse.cost.compare import Comparison


NOTHING_ON_NPU = ("Vela runs none of this model's operators on its NPU (the NPU takes int8 and int16 "
                  "tensors; a float model stays on the CPU): there is nothing to compare. Quantize "
                  "the model first (opfuse quantize).")


def fmt_error(error: float | None) -> str:
    return "-" if error is None else f"{error * 100:+.0f}%"


def _label(names: tuple[str, ...], limit: int = 2) -> str:
    if not names:
        return "-"
    shown = ", ".join(names[:limit])
    return shown + (f" +{len(names) - limit}" if len(names) > limit else "")


def print_comparison(c: Comparison, max_rows: int = 60) -> None:
    cfg = c.vela_config
    title = (f"opfuse vs Vela ({cfg.get('accelerator', '?')}, {cfg.get('system_config', '?')}, "
             f"{cfg.get('memory_mode', '?')})")
    table = Table(title=cell(title), title_justify="left")
    for col, justify in (("TFLite op", "right"), ("opfuse kernels", "left"),
                         ("Vela operator", "left"), ("passes", "right"), ("opfuse", "right"),
                         ("Vela", "right"), ("error", "right"), ("arena live", "right"),
                         ("Vela SRAM", "right")):
        table.add_column(col, justify=justify)
    for row in c.rows[:max_rows]:
        ops = ",".join(str(i) for i in row.tflite_ops) or "-"
        vela = "CPU" if row.vela_cpu else fmt_time(row.vela_s)
        table.add_row(ops, cell(_label(row.kernels)), cell(_label(row.vela_layers)),
                      str(row.vela_passes),
                      fmt_time(row.opfuse_s), vela, "-" if row.vela_cpu else fmt_error(row.error),
                      fmt_bytes(row.opfuse_live_bytes), fmt_bytes(row.vela_staging_bytes))
    if len(c.rows) > max_rows:
        table.add_row("...", f"{len(c.rows) - max_rows} more rows (--json has all)", *[""] * 7)
    table.add_section()
    table.add_row("total", f"{c.opfuse_kernels} kernels", f"{c.vela_passes} Vela passes",
                  str(sum(r.vela_passes for r in c.rows)), fmt_time(c.opfuse_s),
                  fmt_time(c.vela_summary_s), fmt_error(c.error), fmt_bytes(c.opfuse_arena_bytes),
                  fmt_bytes(c.vela_sram_bytes))
    if any(r.vela_cpu for r in c.rows):
        table.add_row("on NPU", "rows Vela runs", f"{c.vela_npu_passes} NPU ops", "",
                      fmt_time(c.opfuse_npu_s),
                      fmt_time(c.vela_summary_s), fmt_error(c.error),
                      fmt_bytes(c.opfuse_npu_arena_bytes), fmt_bytes(c.vela_sram_bytes))
    stdout_console.print(table)
    stdout_console.print("arena: opfuse's planned arena; Vela SRAM: 'Total SRAM used' (per row: its "
               "staging usage). error = (opfuse - Vela) / Vela over the rows Vela runs on its NPU "
               "(CPU: an operator Vela leaves to the CPU).")
    if c.nothing_on_npu:
        stdout_console.print(NOTHING_ON_NPU)
