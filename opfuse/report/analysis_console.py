"""`opfuse analyze` in the terminal: a before -> after summary and a per-kernel table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from opfuse.report.console import cell, say, stdout_console
from opfuse.report.units import fmt_bytes, fmt_count, fmt_energy, fmt_time
from opfuse.report.verdict import verdict_lines
from opfuse.safe_text import for_terminal

if TYPE_CHECKING:
    from opfuse.analysis import Analysis



def _change(before: float, after: float) -> str:
    """A short change for the folding and fusion columns."""
    if not before:
        return "-"
    change = (after - before) / before * 100
    return "same" if round(change) == 0 and after == before else f"{change:+.0f}%"


def _speed(before: float, after: float) -> str:
    return f"{before / after:.2f}x" if after else "-"


def summary_rows(a: Analysis) -> list[tuple[str, ...]]:
    """Rows: figure, as imported, after canonicalization, after fusion, folding's change (imported ->
    canonical), fusion's own change (canonical -> fused)."""
    b, f = a.before, a.after
    c = a.canonical if a.canonical is not None else a.before
    cb, cc, cf = b.cost, c.cost, f.cost

    def row(label: str, fmt, get, change=_change) -> tuple[str, ...]:  # noqa: ANN001
        x, y, z = get(b, cb), get(c, cc), get(f, cf)
        return (label, fmt(x), fmt(y), fmt(z), change(x, y), change(y, z))

    def fit(side) -> str:  # noqa: ANN001
        return "fits" if side.fits else "does NOT fit"

    rows = [
        row("kernels", lambda v: f"{v:,}", lambda s, k: k.kernel_count),
        row("traffic", fmt_bytes, lambda s, k: k.traffic_bytes),
        row("  activations", fmt_bytes, lambda s, k: k.activation_bytes),
        row("  weights" + (" (not counted)" if a.activations_only else ""), fmt_bytes,
            lambda s, k: k.weight_bytes),
        row("FLOPs", fmt_count, lambda s, k: k.flops),
        row("peak arena", fmt_bytes, lambda s, k: s.plan.peak_bytes),
        ("  vs RAM " + fmt_bytes(a.ram_bytes), fit(b), fit(c), fit(f), "", ""),
        row("latency", fmt_time, lambda s, k: k.latency_s,
            lambda x, y: f"{_speed(x, y)} faster" if y else "-"),
        row("energy", fmt_energy, lambda s, k: k.energy_j),
    ]
    if f.cascades:  # cascades go below the layer-by-layer bound: show both
        rows.insert(7, (
            "  layer-by-layer LB", fmt_bytes(b.layer_lower_bound), fmt_bytes(c.layer_lower_bound),
            fmt_bytes(f.layer_lower_bound),
            f"{f.cascades} cascades", f"{f.layer_lower_bound / f.plan.peak_bytes:.2f}x below it",
        ))
    return rows


def print_analysis(a: Analysis, max_rows: int = 40) -> None:
    title = (
        f"{a.model} on {a.target}, {a.precision}, planner {a.planner}"
        + (", activations only" if a.activations_only else "")
    )
    summary = Table(show_edge=False, box=None, pad_edge=False)
    for col, justify in (("", "left"), ("imported", "right"), ("canonical", "right"),
                         ("fused", "right"), ("folding", "right"), ("fusion", "right")):
        summary.add_column(col, justify=justify)
    for row in summary_rows(a):
        summary.add_row(*row)
    verdict = Text()
    for line in verdict_lines(a.to_json()):  # the deployment verdict first: does it fit
        mark, style = {True: ("ok ", "green"), False: ("NO ", "bold red")}.get(line["ok"], ("   ", ""))
        verdict.append(mark, style=style)
        verdict.append(for_terminal(line["text"]) + "\n",
                       style="bold" if line["ok"] is False else "")
    stdout_console.print(Panel(Group(verdict, summary), title=cell(title), expand=False))
    if a.precision_note:
        say(a.precision_note)
    if a.after.unknown or a.before.unknown:
        names = a.after.unknown or a.before.unknown
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        say(
            f"unknown size: {len(names)} tensors ({shown}) have no known shape or type; they count "
            "0 bytes, so traffic, arena, FLOPs, latency and energy above are lower bounds "
            "(give a shape with --input-shape NAME=DIMS)"
        )

    kernels = Table(title=f"{len(a.kernels)} kernels after fusion")
    for col in ("#", "kernel", "FLOPs", "read", "written", "FLOP/B", "bound", "latency", "energy"):
        kernels.add_column(col, justify="left" if col in ("kernel", "bound") else "right")
    shown = sorted(range(len(a.kernels)), key=lambda i: -a.kernels[i].latency_s)[:max_rows]
    for i in sorted(shown):
        k = a.kernels[i]
        style = "cyan" if k.bound == "memory" else "magenta"
        intensity = "inf" if k.arithmetic_intensity == float("inf") else f"{k.arithmetic_intensity:.1f}"
        kernels.add_row(
            str(i), cell(k.name), fmt_count(k.flops), fmt_bytes(k.bytes_read),
            fmt_bytes(k.bytes_written), intensity, cell(k.bound, style), fmt_time(k.latency_s),
            fmt_energy(k.energy_j),
        )
    stdout_console.print(kernels)
    if len(a.kernels) > max_rows:
        say(f"(the {max_rows} slowest kernels of {len(a.kernels)}; --json has them all)")
