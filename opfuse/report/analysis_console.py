"""`opfuse analyze` in the terminal: a before -> after summary and a per-kernel table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.panel import Panel
from rich.table import Table

from opfuse.report.console import _out

if TYPE_CHECKING:
    from opfuse.analysis import Analysis



def fmt_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f}{unit}"
    return f"{int(n)}"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n):,} B"


def fmt_time(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:,.2f} {unit}"
    return f"{s / 1e-9:,.1f} ns"


def fmt_energy(j: float) -> str:
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("uJ", 1e-6)):
        if j >= scale:
            return f"{j / scale:,.2f} {unit}"
    return f"{j / 1e-9:,.1f} nJ"


def _ratio(before: float, after: float, lower_is_better: bool = True) -> str:
    if not before:
        return "-"
    change = (after - before) / before * 100
    if after and lower_is_better and after < before:
        return f"{before / after:.2f}x less ({change:+.0f}%)"
    return f"{change:+.0f}%"


def summary_rows(a: Analysis) -> list[tuple[str, str, str, str]]:
    b, f = a.before, a.after
    cb, cf = b.cost, f.cost
    ram = a.ram_bytes
    rows = _rows(a, b, f, cb, cf, ram)
    if f.cascades:  # cascades go below the layer-by-layer bound: show both
        rows.insert(7, (
            "  layer-by-layer LB", fmt_bytes(b.layer_lower_bound), fmt_bytes(f.layer_lower_bound),
            f"{f.cascades} cascades: {f.layer_lower_bound / f.plan.peak_bytes:.2f}x below it",
        ))
    return rows


def _rows(a, b, f, cb, cf, ram) -> list[tuple[str, str, str, str]]:  # noqa: ANN001
    return [
        ("kernels", f"{cb.kernel_count:,}", f"{cf.kernel_count:,}",
         _ratio(cb.kernel_count, cf.kernel_count)),
        ("traffic", fmt_bytes(cb.traffic_bytes), fmt_bytes(cf.traffic_bytes),
         _ratio(cb.traffic_bytes, cf.traffic_bytes)),
        ("  activations", fmt_bytes(cb.activation_bytes), fmt_bytes(cf.activation_bytes),
         _ratio(cb.activation_bytes, cf.activation_bytes)),
        ("  weights", fmt_bytes(cb.weight_bytes), fmt_bytes(cf.weight_bytes),
         _ratio(cb.weight_bytes, cf.weight_bytes)),
        ("FLOPs", fmt_count(cb.flops), fmt_count(cf.flops), _ratio(cb.flops, cf.flops)),
        ("peak arena", fmt_bytes(b.plan.peak_bytes), fmt_bytes(f.plan.peak_bytes),
         _ratio(b.plan.peak_bytes, f.plan.peak_bytes)),
        ("  vs RAM " + fmt_bytes(ram), "fits" if b.fits else "does NOT fit",
         "fits" if f.fits else "does NOT fit", f"lower bound {fmt_bytes(f.plan.lower_bound_bytes)}"),
        ("latency", fmt_time(cb.latency_s), fmt_time(cf.latency_s),
         f"{cb.latency_s / cf.latency_s:.2f}x faster" if cf.latency_s else "-"),
        ("energy", fmt_energy(cb.energy_j), fmt_energy(cf.energy_j),
         _ratio(cb.energy_j, cf.energy_j)),
    ]


def print_analysis(a: Analysis, max_rows: int = 40) -> None:
    title = (
        f"{a.model} on {a.target}, {a.precision}, planner {a.planner}"
        + (", activations only" if a.activations_only else "")
    )
    summary = Table(show_edge=False, box=None, pad_edge=False)
    for col, justify in (("", "left"), ("before", "right"), ("after", "right"), ("change", "left")):
        summary.add_column(col, justify=justify)
    for row in summary_rows(a):
        summary.add_row(*row)
    _out.print(Panel(summary, title=title, expand=False))

    kernels = Table(title=f"{len(a.kernels)} kernels after fusion")
    for col in ("#", "kernel", "FLOPs", "read", "written", "FLOP/B", "bound", "latency", "energy"):
        kernels.add_column(col, justify="left" if col in ("kernel", "bound") else "right")
    shown = sorted(range(len(a.kernels)), key=lambda i: -a.kernels[i].latency_s)[:max_rows]
    for i in sorted(shown):
        k = a.kernels[i]
        style = "cyan" if k.bound == "memory" else "magenta"
        intensity = "inf" if k.arithmetic_intensity == float("inf") else f"{k.arithmetic_intensity:.1f}"
        kernels.add_row(
            str(i), k.name, fmt_count(k.flops), fmt_bytes(k.bytes_read), fmt_bytes(k.bytes_written),
            intensity, f"[{style}]{k.bound}[/{style}]", fmt_time(k.latency_s),
            fmt_energy(k.energy_j),
        )
    _out.print(kernels)
    if len(a.kernels) > max_rows:
        _out.print(f"(the {max_rows} slowest kernels of {len(a.kernels)}; --json has them all)")
