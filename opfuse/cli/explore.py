"""`opfuse explore`: the interactive roofline explorer."""

from __future__ import annotations

import click

from opfuse.cli.common import api, cli, limit_option, refuse_input


@cli.command("explore")
@limit_option
@click.argument("model", default="seed_pipeline")
@click.option("-o", "--output", default="explorer.html", show_default=True, help="Page to write.")
@click.option("--serve", is_flag=True, help="Also serve the page on 127.0.0.1 until ctrl-c.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port for --serve.")
@click.option("--target", default=None, help="The target the page opens on (a name or a .toml "
              "file; default npu-generic, or the first target that runs the model's own precision "
              "when npu-generic does not), at the model's own precision where it runs there.")
def explore_cmd(model: str, output: str, serve: bool, port: int, target: str | None) -> None:
    """Write the interactive roofline explorer for MODEL (default: the seeds' toy pipeline)."""
    from opfuse.report import explorer

    if serve:
        explorer.check_port(port)  # before anything is written
    refuse_input(model, output)
    if target is not None:
        api.get_target(target)  # an unknown target is one line before the page is built
    explorer.write_explorer(model, output, protect=(model,), target=target)
    click.echo(f"wrote {output}")
    if serve:
        explorer.serve(output, port)
