"""`opfuse fusion` (every fusion made and refused) and `opfuse analyze` (the figures)."""

from __future__ import annotations

import click

from opfuse.cli.common import (
    SHAPE_HELP,
    api,
    cli,
    limit_option,
    refuse_input,
    value_option,
    write_json,
)
from opfuse.report import console


@cli.command("fusion")
@limit_option
@click.argument("model")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--input-shape", "input_shape", multiple=True, help=SHAPE_HELP)
@value_option
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the decisions as JSON.")
@click.option("--no-cascades", is_flag=True, help="The layer-by-layer kernels, no cascades.")
def fusion_cmd(model: str, target: str, input_shape: tuple[str, ...], json_dest: str | None,
               no_cascades: bool = False, input_value: tuple[str, ...] = ()) -> None:
    """Show the kernels MODEL fuses into on a target, and why every other edge was not fused."""
    refuse_input(model, json_dest)
    with console.progress(f"compiling {model} for {target}"):
        result = api.compile(model, target=target, input_shape=input_shape,
                             input_value=input_value)
    if no_cascades:
        result = api.without_cascades(result)
    if json_dest:
        write_json(api.fusion_json(result), json_dest, model)
        if json_dest == "-":
            return
    console.print_fusion(result)


@cli.command("analyze")
@limit_option
@click.argument("model")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--precision", help="fp32, fp16 or int8 (default: the model's own).")
@click.option("--planner", default="greedy-inplace", show_default=True,
              help="Arena planner: naive, greedy or greedy-inplace.")
@click.option("--activations-only", is_flag=True, help="Count activation traffic only.")
@click.option("--input-shape", "input_shape", multiple=True, help=SHAPE_HELP)
@value_option
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the figures as JSON.")
@click.option("--html", "html_dest", metavar="PATH", help="Write the offline HTML report.")
@click.option("--compare", "compare_with", type=click.Choice(["vela"]),
              help="Run Arm Vela on the same .tflite and show its estimate beside ours.")
@click.option("--no-cascades", is_flag=True,
              help="Layer by layer: no row-streamed cascades (as `--emit c --no-cascades`).")
def analyze_cmd(
    model: str,
    target: str,
    precision: str | None,
    planner: str,
    activations_only: bool,
    input_shape: tuple[str, ...],
    json_dest: str | None,
    html_dest: str | None,
    compare_with: str | None = None,
    no_cascades: bool = False,
    input_value: tuple[str, ...] = (),
) -> None:
    """Before vs after fusion: kernels, traffic, arena, roofline latency and energy."""
    from opfuse.report.analysis_console import print_analysis

    refuse_input(model, json_dest, html_dest)
    if compare_with == "vela":
        from opfuse.measure.vela_run import INSTALL_HINT, VelaMissing, vela_available

        if not vela_available():
            raise VelaMissing(INSTALL_HINT)
    comparison = None
    with console.progress(f"compiling {model}"):
        result = api.compile(model, target=target, input_shape=input_shape,
                             input_value=input_value)
        analysis = api.analyze(result, precision=precision, planner=planner,
                               activations_only=activations_only, cascades=not no_cascades)
    if compare_with == "vela":
        from opfuse.measure.vela_run import compare_vela

        with console.progress(f"running Vela on {model}"):
            comparison = compare_vela(result, analysis)
    if html_dest:
        from opfuse.report.data import report_data
        from opfuse.report.html import write_report

        data = report_data(result, analysis)
        if comparison is not None:
            data["compare"] = comparison.to_json()
        write_report(data, html_dest, protect=(model,))
    if json_dest:
        out = analysis.to_json()
        if comparison is not None:
            out["compare"] = comparison.to_json()
        write_json(out, json_dest, model)
        if json_dest == "-":
            return
    print_analysis(analysis)
    if comparison is not None:
        from opfuse.report.vela_console import print_comparison

        print_comparison(comparison)
    if html_dest:
        click.echo(f"wrote {html_dest}")
