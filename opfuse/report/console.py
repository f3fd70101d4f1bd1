"""Terminal tables (rich): colour on a TTY, plain text when piped.

Every name from a model reaches the terminal as ``cell(name)`` or through ``say``: its control and
format characters escaped (``opfuse.safe_text.for_terminal``) and never read as rich markup, so a
node called ``\x1b[2J`` or ``[red]`` prints as those characters (docs/architecture.md, "Names
from a model")."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opfuse.safe_text import for_terminal

if TYPE_CHECKING:
    from opfuse.compiled import CompileResult
    from opfuse.models import ModelSpec
    from opfuse.targets import Target

stdout_console = Console(highlight=False)  # shared by every terminal view
if not stdout_console.is_terminal:  # piped: plain text, and wide enough that nothing wraps
    stdout_console = Console(highlight=False, width=160)
_err = Console(stderr=True, highlight=False)


def cell(text: object, style: str = "") -> Text:
    """A table cell or title holding model text: escaped, literal (no markup, no emoji codes)."""
    return Text(for_terminal(text), style=style)


def say(text: str, style: str = "") -> None:
    """Print ``text`` line by line, each line escaped and literal. A name inside must already be
    escaped where it was put (``for_terminal``), so that its newline cannot fake a line."""
    stdout_console.print(Text("\n".join(for_terminal(line) for line in text.split("\n")), style=style))


@contextmanager
def progress(label: str) -> Iterator[None]:
    """A spinner on stderr while a long step runs; nothing when stderr is not a terminal."""
    if not _err.is_terminal:
        yield
        return
    with _err.status(cell(label)):  # the label holds the model's path
        yield


def print_figures(figures: dict) -> None:
    """What `opfuse calibrate` measured, one figure a row."""
    table = Table(title="measured on this machine")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        if key == "peak_macs_per_s":
            for prec, rate in value.items():
                table.add_row(f"peak {prec}", f"{rate / 1e9:,.1f} GMAC/s")
        elif key == "memory":
            for level in value:
                table.add_row(
                    f"{level['name']} ({level['size_bytes'] / 2**20:,.0f} MiB)",
                    f"{level['bytes_per_s'] / 1e9:,.1f} GB/s",
                )
        elif key == "dispatch_overhead_s":
            table.add_row("per-call overhead", f"{value * 1e6:,.2f} us")
        elif key == "clock_hz":
            table.add_row("clock", f"{value / 1e9:,.2f} GHz")
        elif key == "ram_bytes":
            table.add_row("RAM", f"{value / 2**30:,.1f} GiB")
        elif key == "l1_bytes_per_s":
            if value:
                table.add_row("l1 (reported only)", f">= {value / 1e9:,.1f} GB/s")
        elif key == "warnings":
            table.add_row("hierarchy", "NOT monotone (see warnings)" if value else
                          "monotone: l2 >= l3 >= dram")
        else:
            table.add_row(key, str(value))
    stdout_console.print(table)


def print_compile_summary(result: CompileResult, output: str) -> None:
    before = len(result.before.kernels)
    after = len(result.partition.kernels)
    fired = ", ".join(f"{k} x{v}" for k, v in sorted(result.passes.items()) if v) or "none"
    say(
        f"{for_terminal(result.source)}: {len(list(result.original.graph))} nodes -> "
        f"{len(list(result.optimized.graph))} after canonicalization; "
        f"{before} kernels -> {after} on {for_terminal(result.target.name)}"
    )
    say(f"passes: {fired}")
    say(f"wrote {for_terminal(output)}")


def cascades_line(names: tuple[str, ...], layer_by_layer: bool) -> str:
    """The one line ``compile --emit c`` prints about the cascades its C streams (opfuse names
    them, so no model name is printed)."""
    if layer_by_layer:
        return "C: layer by layer, no cascades (--no-cascades or --no-fuse)"
    if not names:
        return "C: no cascades (`opfuse fusion` says why each edge is not streamed)"
    shown = ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:5])}, ... {names[-1]}"
    return f"C: {len(names)} cascades streamed row by row (as analyze reports): {shown}"


def print_fusion(result: CompileResult) -> None:
    part = result.partition
    table = Table(title=cell(f"{result.source} on {part.target}: {len(part.kernels)} kernels"))
    table.add_column("#", justify="right")
    table.add_column("kernel")
    table.add_column("nodes")
    for i, kernel in enumerate(part.kernels):
        table.add_row(str(i), cell(kernel.name), cell(", ".join(kernel.nodes)))
    stdout_console.print(table)
    _why(part.decisions, "why not fused")
    _why(part.cascade_decisions, "why not streamed in one cascade")
    fired = {k: v for k, v in result.passes.items() if v}
    if fired:
        say("passes: " + ", ".join(f"{k} x{v}" for k, v in sorted(fired.items())))
    counts = Counter(len(k.nodes) for k in part.kernels)
    say(
        f"{len(result.before.kernels)} kernels as imported -> {len(part.kernels)} fused "
        f"({sum(n for s, n in counts.items() if s > 1)} hold several ops"
        + (f", {len(part.cascades)} are cascades)" if part.cascades else ")")
    )


def _why(decisions, title: str) -> None:  # noqa: ANN001 (tuple[Decision, ...])
    by_reason: dict[str, list] = defaultdict(list)
    for d in decisions:
        by_reason[d.reason].append(d)
    if by_reason:
        why = Table(title=title)
        why.add_column("reason")
        why.add_column("edges", justify="right")
        why.add_column("example")
        for reason, items in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            why.add_row(cell(reason), str(len(items)), cell(items[0].message))
        stdout_console.print(why)
        from opfuse.fusion import REASONS  # here, not at the top: `opfuse --help` stays light

        say("\n".join(f"  {for_terminal(r)}: {REASONS.get(r, '')}" for r in sorted(by_reason)),
            style="dim")


def print_models(specs: list[ModelSpec]) -> None:
    table = Table(title="built-in models")
    table.add_column("name")
    table.add_column("description")
    for spec in specs:
        table.add_row(cell(spec.name), cell(spec.description))
    stdout_console.print(table)


def print_targets(targets: list[Target]) -> None:
    table = Table(title="targets")
    table.add_column("name")
    table.add_column("precisions")
    table.add_column("description")
    for t in targets:
        table.add_row(cell(t.name), cell(", ".join(t.precisions)), cell(t.description))
    stdout_console.print(table)
