"""`opfuse sweep`: many models x targets x precisions (the work is opfuse/sweep/command.py)."""

from __future__ import annotations

import sys

import click

from opfuse.cli.common import SHAPE_HELP, VALUE_HELP, cli


@cli.command("sweep")
@click.argument("models", nargs=-1, required=True)
@click.option("--targets", default="all", show_default=True,
              help="all, or target names (or .toml files) separated by commas.")
@click.option("--precisions", default="fp32,fp16,int8", show_default=True,
              help="Precisions to cost (a quantized model: its own only; see the README).")
@click.option("--emulate", is_flag=True, help="Also build the C and run it in QEMU where the "
              "target has a board (cortex-m4, cortex-m7, cortex-m33, cortex-m55): instructions, ELF footprint, "
              "verdict.")
@click.option("-o", "--output", help="Rows as .parquet (pyarrow), .csv or .json.")
@click.option("--html", "html_dest", metavar="PATH", help="Write the models x targets page.")
@click.option("--jobs", type=click.IntRange(1), help="Worker processes (default: the cores).")
@click.option("--ray", "ray_address", metavar="ADDRESS|local",
              help="Run the tasks on a Ray cluster (pip install 'opfuse[ray]'); 'local' starts "
              "one on 127.0.0.1. Results come back through Ray's deserialization (pickle), so "
              "use only a cluster you trust.")
@click.option("--resume", is_flag=True, help="Skip the rows already in the output file.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300,
              show_default=True, help="With --emulate: seconds one QEMU run may take.")
@click.option("--input-shape", "input_shape", multiple=True,
              help=SHAPE_HELP + " Bound in every model swept: a model without that input is an "
              "error row that names it.")
@click.option("--calibration", metavar="DATA", help="Quantize each float model with DATA (as "
              "opfuse quantize) so its int8 row is a real int8 build, not a what-if.")
@click.option("--input-value", "input_value", multiple=True,
              help=VALUE_HELP + " Bound in every model swept, as --input-shape is.")
def sweep_cmd(models: tuple[str, ...], targets: str, precisions: str, emulate: bool,
              output: str | None, html_dest: str | None, jobs: int | None,
              ray_address: str | None, resume: bool, quiet: bool, timeout_s: float,
              input_shape: tuple[str, ...], calibration: str | None = None,
              input_value: tuple[str, ...] = ()) -> None:
    """One row per MODEL (files, folders, built-in names) x target x precision: fit, predicted
    latency and energy, what blocks fusion, and with --emulate the measured figures."""
    from opfuse.sweep.command import SweepArgs, sweep_command

    code = sweep_command(SweepArgs(models, targets, precisions, emulate, output, html_dest, jobs,
                                   ray_address, resume, quiet, timeout_s, input_shape,
                                   calibration, input_value))
    if code:
        sys.exit(code)
