"""The `opfuse` command: parses options, calls the pipeline, prints. No logic lives here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from opfuse.atomic import write_atomic
from opfuse.errors import OpfuseError
from opfuse.report import console
from opfuse.targets import DEFAULT_TARGET


class _LazyApi:
    """opfuse.api, imported on first use: `opfuse --help`, `models` and `targets` then start
    without loading onnx_ir, onnxscript or onnxruntime (benchmarks/startup.py measures it)."""

    DEFAULT_TARGET = DEFAULT_TARGET  # read by the option decorators at import

    def __getattr__(self, name: str):
        from opfuse import api as module

        return getattr(module, name)


api = _LazyApi()

_SHAPE_HELP = ("Bind a dynamic input: NAME=1x3x224x224 (repeatable). A leading symbolic dim is 1. "
               "Also gives the shape of any value inference cannot know (a custom op's output).")


def _write_json(data: dict, dest: str) -> None:
    text = json.dumps(data, indent=2) + "\n"
    if dest == "-":
        sys.stdout.write(text)
    else:
        write_atomic(dest, text)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="opfuse")
def cli() -> None:
    """opfuse: operator-fusion compiler and analyzer for edge inference."""


@cli.command("compile")
@click.argument("model")
@click.option("-o", "--output", required=True,
              help="The optimized ONNX file, or with --emit c the folder for the C project.")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--input-shape", "input_shape", multiple=True, help=_SHAPE_HELP)
@click.option("--emit", "emit_kind", type=click.Choice(["onnx", "c"]), default="onnx",
              show_default=True, help="Portable ONNX, or C99 with fused kernels and a static arena.")
@click.option("--no-fuse", is_flag=True, help="With --emit c: one kernel per node (for comparison).")
@click.option("--cascades", is_flag=True,
              help="With --emit c: stream rows through the target's cascades (a smaller arena).")
@click.option("--ort", is_flag=True, help="Emit com.microsoft FusedConv/FusedGemm for onnxruntime.")
@click.option("--check", is_flag=True, help="Run the original and the output and compare.")
@click.option("--prefix", default="opfuse", show_default=True, help="With --emit c: the name of "
              "every exported symbol (NAME_model_invoke, NAME_ARENA_BYTES...), so several models "
              "link into one program.")
def compile_cmd(
    model: str,
    output: str,
    target: str,
    input_shape: tuple[str, ...],
    emit_kind: str,
    no_fuse: bool,
    ort: bool,
    check: bool,
    cascades: bool = False,
    prefix: str = "opfuse",
) -> None:
    """Canonicalize and fuse MODEL (a path or a built-in name) for a target; write ONNX or C."""
    if emit_kind == "c" and ort:
        raise OpfuseError("--ort applies to --emit onnx only")
    if emit_kind == "onnx" and (no_fuse or cascades):
        raise OpfuseError("--no-fuse and --cascades apply to --emit c only")
    if emit_kind == "onnx" and prefix != "opfuse":
        raise OpfuseError("--prefix applies to --emit c only")
    with console.progress(f"compiling {model} for {target}"):
        result = api.compile(model, target=target, input_shape=input_shape)
        if emit_kind == "c":
            if Path(output).resolve() == Path(model).resolve():
                raise OpfuseError(f"{output}: is the input model; choose another folder")
            emitted = api.emit_c(result, output, fuse=not no_fuse, cascades=cascades,
                                 prefix=prefix)
        else:
            proto = api.emit(result, ort=ort)
            api.save(proto, output, protect=model)
    console.print_compile_summary(result, output)
    if emit_kind == "c":
        click.echo(
            f"C: {emitted.kernels} kernels, arena {emitted.arena_bytes:,} bytes "
            f"({prefix.upper()}_ARENA_BYTES), stack scratch {emitted.stack_scratch_bytes:,} bytes, "
            f"weights {emitted.weights_bytes:,} bytes"
        )
        if cascades:
            click.echo(f"C: {emitted.cascades} cascades streamed row by row"
                       + (f", {len(emitted.cascades_split)} run layer by layer:"
                          if emitted.cascades_split else ""))
            for name, why in emitted.cascades_split:
                click.echo(f"  {name}: {why}")
    if check:
        with console.progress("running both in onnxruntime" if emit_kind == "onnx"
                              else "building the C and running it beside onnxruntime"):
            if emit_kind == "c":
                report = api.validate_c(model, target, fuse=not no_fuse, input_shape=input_shape,
                                        cascades=cascades)
            else:
                report = api.validate(model, proto, input_shape=input_shape)
        console.print_validation(report)
        if not report.ok:
            sys.exit(1)


@cli.command("validate")
@click.argument("original")
@click.argument("optimized", required=False)
@click.option("--backend", type=click.Choice(["onnx", "c"]), default="onnx", show_default=True,
              help="c: compile ORIGINAL to C, build and run it, and compare with onnxruntime.")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True,
              help="Target whose fusion the C follows (--backend c).")
@click.option("--inputs", type=click.Path(dir_okay=False), help=".npz file of named inputs.")
@click.option("--rtol", type=float, default=1e-4, show_default=True)
@click.option("--atol", type=float, default=1e-4, show_default=True)
@click.option("--input-shape", "input_shape", multiple=True, help=_SHAPE_HELP)
@click.option("--emulate", is_flag=True, help="With --backend c: cross-compile for the target's "
              "board (cortex-m4, cortex-m7) and run it in QEMU; print footprint and counts.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300,
              show_default=True, help="With --emulate: seconds the QEMU run may take.")
@click.option("--per-kernel", "per_kernel", is_flag=True, help="With --backend c: compare every "
              "kernel's output too (a debug build) and name the first kernel that diverges.")
@click.option("--cascades", is_flag=True, help="With --backend c (and --emulate): stream rows "
              "through the target's cascades (a smaller arena) instead of layer by layer.")
def validate_cmd(
    original: str,
    optimized: str | None,
    backend: str,
    target: str,
    inputs: str | None,
    rtol: float,
    atol: float,
    input_shape: tuple[str, ...],
    emulate: bool,
    timeout_s: float,
    per_kernel: bool = False,
    cascades: bool = False,
) -> None:
    """Run ORIGINAL and OPTIMIZED (or ORIGINAL's generated C) on the same inputs; exit 1 beyond
    tolerance."""
    if emulate and backend != "c":
        raise OpfuseError("--emulate runs the generated C: use it with --backend c")
    if per_kernel and (backend != "c" or emulate):
        raise OpfuseError("--per-kernel compares the generated C's kernels: use it with "
                          "--backend c (without --emulate)")
    if cascades and (backend != "c" or per_kernel):
        raise OpfuseError("--cascades streams the generated C's cascades: use it with "
                          "--backend c (without --per-kernel)")
    if backend == "onnx" and optimized is None:
        raise OpfuseError("validate needs ORIGINAL and OPTIMIZED (or --backend c with one model)")
    if backend == "c" and optimized is not None:
        raise OpfuseError("--backend c takes one model: it compiles ORIGINAL to C itself")
    if emulate:
        _validate_emulated(original, target, inputs, rtol, atol, input_shape, timeout_s, cascades)
        return
    with console.progress("running the models"):
        if backend == "c":
            report = api.validate_c(original, target, inputs=inputs, rtol=rtol, atol=atol,
                                    input_shape=input_shape, cascades=cascades)
        else:
            report = api.validate(original, optimized, inputs=inputs, rtol=rtol, atol=atol,
                                  input_shape=input_shape)
    console.print_validation(report)
    if per_kernel and not _per_kernel(original, target, inputs, rtol, atol, input_shape):
        sys.exit(1)
    if not report.ok:
        sys.exit(1)


def _per_kernel(original: str, target: str, inputs: str | None, rtol: float, atol: float,
                input_shape: tuple[str, ...]) -> bool:
    from opfuse.backends.c.perkernel import format_per_kernel

    with console.progress("running every kernel against the reference"):
        kernels = api.per_kernel_c(original, target, inputs=inputs, rtol=rtol, atol=atol,
                                   input_shape=input_shape)
    click.echo(format_per_kernel(kernels))
    return kernels.ok


def _validate_emulated(original: str, target: str, inputs: str | None, rtol: float,
                       atol: float, input_shape: tuple[str, ...], timeout_s: float,
                       cascades: bool = False) -> None:
    from opfuse.backends.c.emulate import format_emulation

    with console.progress(f"cross-compiling for {target} and running it in QEMU"):
        emu = api.emulate_c(original, target, inputs=inputs, rtol=rtol, atol=atol,
                            input_shape=input_shape, timeout_s=timeout_s, cascades=cascades)
    console.print_validation(emu.report)
    click.echo(format_emulation(emu))
    if not emu.report.ok:
        sys.exit(1)


@cli.command("bench")
@click.argument("model")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--repeats", type=click.IntRange(1), default=20, show_default=True,
              help="Timed runs per runner, split over 5 alternating blocks.")
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the medians as JSON.")
def bench_cmd(model: str, target: str, repeats: int, json_dest: str | None) -> None:
    """Warm median latency, one thread: fused C, unfused C, onnxruntime at ORT_ENABLE_ALL and
    ORT_DISABLE_ALL, in alternating blocks (first run of each dropped), with the blocks' spread."""
    from opfuse.backends.c import format_bench

    with console.progress(f"building and timing {model}"):
        data = api.bench(model, target, repeats=repeats)
    if json_dest:
        _write_json(data, json_dest)
        if json_dest == "-":
            return
    click.echo(format_bench(data))


@cli.command("fusion")
@click.argument("model")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--input-shape", "input_shape", multiple=True, help=_SHAPE_HELP)
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the decisions as JSON.")
def fusion_cmd(model: str, target: str, input_shape: tuple[str, ...], json_dest: str | None) -> None:
    """Show the kernels MODEL fuses into on a target, and why every other edge was not fused."""
    with console.progress(f"compiling {model} for {target}"):
        result = api.compile(model, target=target, input_shape=input_shape)
    if json_dest:
        _write_json(api.fusion_json(result), json_dest)
        if json_dest == "-":
            return
    console.print_fusion(result)


@cli.command("analyze")
@click.argument("model")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--precision", help="fp32, fp16 or int8 (default: the model's own).")
@click.option("--planner", default="greedy-inplace", show_default=True,
              help="Arena planner: naive, greedy or greedy-inplace.")
@click.option("--activations-only", is_flag=True, help="Count activation traffic only.")
@click.option("--input-shape", "input_shape", multiple=True, help=_SHAPE_HELP)
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the figures as JSON.")
@click.option("--html", "html_dest", metavar="PATH", help="Write the offline HTML report.")
@click.option("--compare", "compare_with", type=click.Choice(["vela"]),
              help="Run Arm Vela on the same .tflite and show its estimate beside ours.")
@click.option("--no-cascades", is_flag=True,
              help="Layer by layer: no row-streamed cascades (what `--emit c` runs by default).")
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
) -> None:
    """Before vs after fusion: kernels, traffic, arena, roofline latency and energy."""
    from opfuse.report.analysis_console import print_analysis

    if compare_with == "vela":
        from opfuse.cost.vela_run import INSTALL_HINT, VelaMissing, vela_available

        if not vela_available():
            raise VelaMissing(INSTALL_HINT)
    comparison = None
    with console.progress(f"compiling {model}"):
        result = api.compile(model, target=target, input_shape=input_shape)
        analysis = api.analyze(result, precision=precision, planner=planner,
                               activations_only=activations_only, cascades=not no_cascades)
    if compare_with == "vela":
        from opfuse.cost.vela_run import compare_vela

        with console.progress(f"running Vela on {model}"):
            comparison = compare_vela(result, analysis)
    if html_dest:
        from opfuse.report.data import report_data
        from opfuse.report.html import write_report

        data = report_data(result, analysis)
        if comparison is not None:
            data["compare"] = comparison.to_json()
        write_report(data, html_dest)
    if json_dest:
        out = analysis.to_json()
        if comparison is not None:
            out["compare"] = comparison.to_json()
        _write_json(out, json_dest)
        if json_dest == "-":
            return
    print_analysis(analysis)
    if comparison is not None:
        from opfuse.report.vela_console import print_comparison

        print_comparison(comparison)
    if html_dest:
        click.echo(f"wrote {html_dest}")


@cli.command("calibrate")
@click.option("-o", "--output", help="Where to write the target (default: the user target folder).")
def calibrate_cmd(output: str | None) -> None:
    """Measure this machine (bandwidth, GEMM rate, call overhead) and write the target 'host'."""
    from opfuse.cost.calibrate import calibrate, write_host_target

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


@cli.command("explore")
@click.argument("model", default="seed_pipeline")
@click.option("-o", "--output", default="explorer.html", show_default=True, help="Page to write.")
@click.option("--serve", is_flag=True, help="Also serve the page on 127.0.0.1 until ctrl-c.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port for --serve.")
def explore_cmd(model: str, output: str, serve: bool, port: int) -> None:
    """Write the interactive roofline explorer for MODEL (default: the seeds' toy pipeline)."""
    from opfuse.report import explorer

    explorer.write_explorer(model, output)
    click.echo(f"wrote {output}")
    if serve:
        explorer.serve(output, port)


def _quiet_libraries() -> None:
    """onnx_ir and onnxscript log warnings about odd models; the user gets opfuse's one line."""
    import logging
    import warnings

    for name in ("onnx_ir", "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # numpy's invalid-value warnings while folding a model's constants (sqrt of a negative
    # variance...) would print raw lines; what the values make of the model is checked instead
    warnings.filterwarnings("ignore", category=RuntimeWarning)


def main(argv: list[str] | None = None) -> None:
    _quiet_libraries()
    try:
        cli.main(args=argv, prog_name="opfuse", standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except OpfuseError as exc:  # one line, whatever names the model holds (\n in a node name...)
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(exc))
        click.echo(f"opfuse: error: {text}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
