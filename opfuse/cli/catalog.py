"""`opfuse calibrate`, `opfuse models` and `opfuse targets`: this machine's figures and what
opfuse knows."""

from __future__ import annotations

import click

from opfuse.cli.common import cli
from opfuse.report import console


@cli.command("calibrate")
@click.option("-o", "--output", help="Where to write the target (default: the user target folder).")
def calibrate_cmd(output: str | None) -> None:
    """Measure this machine (bandwidth, GEMM rate, call overhead) and write the target 'host'."""
    from opfuse.measure.calibrate.host import calibrate, write_host_target

    with console.progress("measuring bandwidth, GEMM rate and call overhead"):
        figures = calibrate()
    path = write_host_target(output, figures)
    console.print_figures(figures)
    for line in figures.get("warnings", []):  # a non-monotone hierarchy is said, not hidden
        click.echo(f"warning: {line}", err=True)
    click.echo(f"wrote {path} (use --target host)")


@cli.command("models")
def models_cmd() -> None:
    """List the built-in models (usable wherever a model path is taken)."""
    from opfuse import models

    console.print_models(list(models.MODELS.values()))


@cli.command("targets")
def targets_cmd() -> None:
    """List the target profiles."""
    from opfuse.targets import list_targets, load_target

    console.print_targets([load_target(name) for name in list_targets()])
