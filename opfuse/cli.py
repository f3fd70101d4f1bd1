"""The `opfuse` command: parses options, calls the pipeline, prints. No logic lives here."""

from __future__ import annotations

import contextvars
import json
import sys
from typing import TYPE_CHECKING

import click

from opfuse.errors import OpfuseError, Unsupported
from opfuse.output import check_output, write_file
from opfuse.quantize.options import quantize_options
from opfuse.report import console
from opfuse.safe_text import for_terminal
from opfuse.targets import DEFAULT_TARGET

if TYPE_CHECKING:
    from opfuse.measure.validate.ort import ValidationReport


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
_VALUE_HELP = ("Bind a graph input to a constant: NAME=VALUE, a scalar or comma-separated values "
               "(repeatable), e.g. sr=16000; an If on it folds to the branch it takes, and the "
               "reference run is fed the same value.")
_value_option = click.option("--input-value", "input_value", multiple=True, help=_VALUE_HELP)


def _apply_limits(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> None:
    if specs:
        from opfuse.frontends.limits import parse_limits, set_limits

        set_limits(parse_limits(specs))


_limit_option = click.option(
    "--limit", "limits", multiple=True, metavar="NAME=SIZE", expose_value=False,
    callback=_apply_limits, help="Raise a size limit (repeatable): constant=256MiB, "
    "constants_total=1GiB, activation=2GiB, extent=65536 are the defaults.")


def _write_json(data: dict, dest: str, model: str) -> None:
    write_file(dest, json.dumps(data, indent=2) + "\n", protect=(model,))


def _refuse_input(model: str, *outputs: str | None) -> None:
    """Before any work: no output option may name the input model (opfuse/output)."""
    for dest in outputs:
        if dest is not None:
            check_output(dest, (model,))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="opfuse")
def cli() -> None:
    """opfuse: operator-fusion compiler and analyzer for edge inference."""


@cli.command("compile")
@_limit_option
@click.argument("model")
@click.option("-o", "--output", required=True,
              help="The optimized ONNX file, or with --emit c the folder for the C project.")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--input-shape", "input_shape", multiple=True, help=_SHAPE_HELP)
@_value_option
@click.option("--emit", "emit_kind", type=click.Choice(["onnx", "c"]), default="onnx",
              show_default=True, help="Portable ONNX, or C99 with fused kernels and a static arena.")
@click.option("--no-fuse", is_flag=True, help="With --emit c: one kernel per node (for comparison).")
@click.option("--no-cascades", is_flag=True, help="With --emit c: run the kernels layer by layer, "
              "not the row-streamed cascades analyze reports (a larger arena).")
@click.option("--cascades", is_flag=True, help="The default, kept for old scripts: stream rows "
              "through the partition's cascades.")
@click.option("--ort", is_flag=True, help="Emit com.microsoft FusedConv/FusedGemm for onnxruntime.")
@click.option("--check", is_flag=True, help="Run the original and the output and compare.")
@click.option("--inputs", type=click.Path(dir_okay=False), help="With --check: .npz file of "
              "named inputs (default: seeded random, integer inputs within what the model indexes).")
@click.option("--prefix", default="opfuse", show_default=True, help="With --emit c: the name of "
              "every exported symbol (NAME_model_invoke, NAME_ARENA_BYTES...), so several models "
              "link into one program.")
@click.option("--force", is_flag=True, help="With --emit c: write into a folder that holds files "
              "opfuse did not write (they are kept; opfuse's own are replaced).")
@click.option("--precision", type=click.Choice(["int8"]), help="With --emit c: quantize the float "
              "MODEL first (as opfuse quantize, --calibration) and write its int8 C, the QDQ "
              "model beside it; --check then compares the C with the float model.")
@quantize_options
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
    force: bool = False,
    no_cascades: bool = False,
    inputs: str | None = None,
    precision: str | None = None,
    calibration: str | None = None,
    eval_data: str | None = None,
    method: str = "minmax",
    per_tensor: bool = False,
    keep_float: tuple[str, ...] = (),
    input_value: tuple[str, ...] = (),
) -> None:
    """Canonicalize and fuse MODEL (a path or a built-in name) for a target; write ONNX or C."""
    from opfuse.quantize.command import Int8Args, compile_int8

    int8 = Int8Args(calibration, eval_data, method, per_tensor, keep_float)
    int8.refuse_without_calibration(precision)
    if precision == "int8" and emit_kind != "c":
        raise OpfuseError("--precision int8 writes int8 C: use it with --emit c (opfuse quantize "
                          "writes the QDQ ONNX alone)")
    if precision == "int8" and inputs:
        raise OpfuseError("--inputs: with --precision int8, --check runs on the --eval samples "
                          "(default: the held-out part of --calibration)")
    if emit_kind == "c" and ort:
        raise OpfuseError("--ort applies to --emit onnx only")
    if emit_kind == "onnx" and (no_fuse or cascades or no_cascades):
        raise OpfuseError("--no-fuse, --cascades and --no-cascades apply to --emit c only")
    if cascades and no_cascades:
        raise OpfuseError("--cascades (the default) and --no-cascades contradict each other")
    if emit_kind == "onnx" and prefix != "opfuse":
        raise OpfuseError("--prefix applies to --emit c only")
    if emit_kind == "onnx" and force:
        raise OpfuseError("--force applies to --emit c only")
    if inputs and not check:
        raise OpfuseError("--inputs gives the values --check runs on: use it with --check")
    _refuse_input(model, output)
    if precision == "int8":
        for data in (calibration, eval_data):
            if data is not None:
                _refuse_input(data, output)
        code = compile_int8(model, output, target, input_shape, int8, fuse=not no_fuse,
                            cascades=not no_cascades, prefix=prefix, force=force, check=check)
        if code:
            sys.exit(code)
        return
    with console.progress(f"compiling {model} for {target}"):
        result = api.compile(model, target=target, input_shape=input_shape,
                             input_value=input_value)
        feeds = api.read_inputs(inputs, result)  # a bad file fails before anything is written
        if emit_kind == "c":
            emitted = api.emit_c(result, output, fuse=not no_fuse, cascades=not no_cascades,
                                 prefix=prefix, force=force)
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
        click.echo(console.cascades_line(emitted.cascades, no_cascades or no_fuse))
    if check:
        with console.progress("running both in onnxruntime" if emit_kind == "onnx"
                              else "building the C and running it beside onnxruntime"):
            if emit_kind == "c":
                report = api.validate_c(model, target, fuse=not no_fuse, input_shape=input_shape,
                                        cascades=not no_cascades, inputs=feeds,
                                        input_value=input_value)
            else:
                report = api.validate(model, proto, input_shape=input_shape, inputs=feeds,
                                      input_value=input_value)
        _print_validation(report)
        if not report.ok:
            sys.exit(1)


@cli.command("quantize")
@_limit_option
@click.argument("model")
@click.option("-o", "--output", required=True, help="The QDQ ONNX file to write.")
@click.option("--calibration", "calibration", required=True, metavar="DATA",
              help=".npz with one array per graph input (leading sample axis), or a folder of "
              "NAME.npy files.")
@click.option("--eval", "eval_data", metavar="DATA", help="Held-out samples for the accuracy "
              "report (default: the last quarter of --calibration, not calibrated on).")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True,
              help="Target whose kernels' boundaries are quantized.")
@click.option("--method", type=click.Choice(["minmax", "percentile", "entropy", "mse"]),
              default="minmax", show_default=True, help="How an activation's range is calibrated.")
@click.option("--per-tensor", is_flag=True, help="One weight scale per tensor, not per channel.")
@click.option("--keep-float", "keep_float", multiple=True, metavar="NODE", help="Leave this kernel "
              "(as the report names it, or one of its nodes) float between DQ and Q (repeatable).")
@click.option("--input-shape", "input_shape", multiple=True, help=_SHAPE_HELP)
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the accuracy report as JSON.")
@click.option("--html", "html_dest", metavar="PATH", help="Write the accuracy report as a page.")
def quantize_cmd(model: str, output: str, calibration: str, eval_data: str | None, target: str,
                 method: str, per_tensor: bool, input_shape: tuple[str, ...],
                 json_dest: str | None, keep_float: tuple[str, ...] = (),
                 html_dest: str | None = None) -> None:
    """Quantize a float MODEL to int8 QDQ ONNX at the boundaries of the kernels opfuse fuses for
    the target; print its accuracy against the float model."""
    from opfuse.quantize.command import print_quantized

    _refuse_input(model, output, json_dest, html_dest)
    for data in (calibration, eval_data):
        if data is not None:
            _refuse_input(data, output, json_dest, html_dest)
    if html_dest is not None and not html_dest.lower().endswith((".html", ".htm")):
        raise OpfuseError(f"{html_dest}: --html writes a page: name it .html")
    from pathlib import Path

    for dest in (output, json_dest, html_dest):  # one missing folder must not leave the others
        if dest not in (None, "-") and not (Path(dest).parent if str(Path(dest).parent)
                                            else Path(".")).is_dir():
            raise OpfuseError(f"{dest}: folder '{Path(dest).parent}' does not exist")
    with console.progress(f"quantizing {model} for {target}"):
        result = api.compile(model, target=target, input_shape=input_shape)
        done = api.quantize(result, calibration, method=method, per_channel=not per_tensor,
                            evaluation=eval_data, keep_float=keep_float)
        api.save(done.proto, output, protect=model)  # only once everything has succeeded
    if html_dest:
        from opfuse.report.quantize_page import write_quantize_page

        write_quantize_page(done.to_json(), html_dest, protect=(model, calibration, eval_data))
    if json_dest:
        _write_json(done.to_json(), json_dest, model)
        if json_dest == "-":
            return
    print_quantized(done, model, target, calibration, eval_data)
    console.say(f"wrote {for_terminal(output)}" + (f" and {for_terminal(html_dest)}"
                                                   if html_dest else ""))


@cli.command("validate")
@_limit_option
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
@_value_option
@click.option("--emulate", is_flag=True, help="With --backend c: cross-compile for the target's "
              "board (cortex-m4, cortex-m7, cortex-m33, cortex-m55) and run it in QEMU; print footprint and counts.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300,
              show_default=True, help="With --emulate: seconds the QEMU run may take.")
@click.option("--per-kernel", "per_kernel", is_flag=True, help="With --backend c: compare every "
              "kernel's output too (a debug build) and name the first kernel that diverges.")
@click.option("--no-cascades", is_flag=True, help="With --backend c (and --emulate): run the "
              "kernels layer by layer, not the row-streamed cascades analyze reports.")
@click.option("--cascades", is_flag=True, help="The default, kept for old scripts: the C streams "
              "the partition's cascades.")
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
    no_cascades: bool = False,
    input_value: tuple[str, ...] = (),
) -> None:
    """Run ORIGINAL and OPTIMIZED (or ORIGINAL's generated C) on the same inputs; exit 1 beyond
    tolerance."""
    if emulate and backend != "c":
        raise OpfuseError("--emulate runs the generated C: use it with --backend c")
    if per_kernel and (backend != "c" or emulate):
        raise OpfuseError("--per-kernel compares the generated C's kernels: use it with "
                          "--backend c (without --emulate)")
    if (cascades or no_cascades) and backend != "c":
        raise OpfuseError("--cascades and --no-cascades choose how the generated C runs: use "
                          "them with --backend c")
    if cascades and (no_cascades or per_kernel):
        raise OpfuseError("--cascades (the default) cannot be combined with --no-cascades or "
                          "--per-kernel (which compares the kernels layer by layer)")
    cascades = not no_cascades
    if backend == "onnx" and optimized is None:
        raise OpfuseError("validate needs ORIGINAL and OPTIMIZED (or --backend c with one model)")
    if backend == "c" and optimized is not None:
        raise OpfuseError("--backend c takes one model: it compiles ORIGINAL to C itself")
    if emulate:
        _validate_emulated(original, target, inputs, rtol, atol, input_shape, timeout_s, cascades,
                           input_value)
        return
    with console.progress("running the models"):
        if backend == "c":
            report = api.validate_c(original, target, inputs=inputs, rtol=rtol, atol=atol,
                                    input_shape=input_shape, cascades=cascades and not per_kernel,
                                    input_value=input_value)
        else:
            report = api.validate(original, optimized, inputs=inputs, rtol=rtol, atol=atol,
                                  input_shape=input_shape, input_value=input_value)
    _print_validation(report)
    kernels = (_per_kernel(original, target, inputs, rtol, atol, input_shape, input_value)
               if per_kernel else None)
    if kernels is not None and not kernels.ok:
        sys.exit(1)
    if kernels is not None and kernels.isolated and not report.ok:
        # quantized ONNX: the kernels, each fed the reference's inputs, are what is judged
        # (docs/architecture.md, "int8 in the IR"); the whole-model difference is informative
        click.echo("verdict: every kernel within 1 quantization step of the reference when fed "
                   "its inputs; the whole-model difference above compounds across layers")
        return
    if not report.ok:
        sys.exit(1)


def _per_kernel(original: str, target: str, inputs: str | None, rtol: float, atol: float,
                input_shape: tuple[str, ...], input_value: tuple[str, ...] = ()):
    from opfuse.measure.validate.per_kernel import format_per_kernel

    with console.progress("running every kernel against the reference"):
        kernels = api.per_kernel_c(original, target, inputs=inputs, rtol=rtol, atol=atol,
                                   input_shape=input_shape, input_value=input_value)
    click.echo(format_per_kernel(kernels))
    return kernels


def _validate_emulated(original: str, target: str, inputs: str | None, rtol: float,
                       atol: float, input_shape: tuple[str, ...], timeout_s: float,
                       cascades: bool = False, input_value: tuple[str, ...] = ()) -> None:
    from opfuse.measure.run.qemu import format_emulation

    with console.progress(f"cross-compiling for {target} and running it in QEMU"):
        emu = api.emulate_c(original, target, inputs=inputs, rtol=rtol, atol=atol,
                            input_shape=input_shape, timeout_s=timeout_s, cascades=cascades,
                            input_value=input_value)
    _print_validation(emu.report)
    click.echo(format_emulation(emu))
    if not emu.report.ok:
        sys.exit(1)


@cli.command("bench")
@_limit_option
@click.argument("model")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--repeats", type=click.IntRange(1), default=20, show_default=True,
              help="Timed runs per runner, split over 5 alternating blocks.")
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the medians as JSON.")
def bench_cmd(model: str, target: str, repeats: int, json_dest: str | None) -> None:
    """Warm median latency, one thread: fused C, unfused C, onnxruntime at ORT_ENABLE_ALL and
    ORT_DISABLE_ALL, in alternating blocks (first run of each dropped), with the blocks' spread."""
    from opfuse.measure.validate.c_float import format_bench

    _refuse_input(model, json_dest)
    with console.progress(f"building and timing {model}"):
        data = api.bench(model, target, repeats=repeats)
    if json_dest:
        _write_json(data, json_dest, model)
        if json_dest == "-":
            return
    click.echo(format_bench(data))


@cli.command("fusion")
@_limit_option
@click.argument("model")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--input-shape", "input_shape", multiple=True, help=_SHAPE_HELP)
@_value_option
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the decisions as JSON.")
@click.option("--no-cascades", is_flag=True, help="The layer-by-layer kernels, no cascades.")
def fusion_cmd(model: str, target: str, input_shape: tuple[str, ...], json_dest: str | None,
               no_cascades: bool = False, input_value: tuple[str, ...] = ()) -> None:
    """Show the kernels MODEL fuses into on a target, and why every other edge was not fused."""
    _refuse_input(model, json_dest)
    with console.progress(f"compiling {model} for {target}"):
        result = api.compile(model, target=target, input_shape=input_shape,
                             input_value=input_value)
    if no_cascades:
        result = api.without_cascades(result)
    if json_dest:
        _write_json(api.fusion_json(result), json_dest, model)
        if json_dest == "-":
            return
    console.print_fusion(result)


@cli.command("analyze")
@_limit_option
@click.argument("model")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--precision", help="fp32, fp16 or int8 (default: the model's own).")
@click.option("--planner", default="greedy-inplace", show_default=True,
              help="Arena planner: naive, greedy or greedy-inplace.")
@click.option("--activations-only", is_flag=True, help="Count activation traffic only.")
@click.option("--input-shape", "input_shape", multiple=True, help=_SHAPE_HELP)
@_value_option
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

    _refuse_input(model, json_dest, html_dest)
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
        _write_json(out, json_dest, model)
        if json_dest == "-":
            return
    print_analysis(analysis)
    if comparison is not None:
        from opfuse.report.vela_console import print_comparison

        print_comparison(comparison)
    if html_dest:
        click.echo(f"wrote {html_dest}")


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
              help=_SHAPE_HELP + " Bound in every model swept: a model without that input is an "
              "error row that names it.")
@click.option("--calibration", metavar="DATA", help="Quantize each float model with DATA (as "
              "opfuse quantize) so its int8 row is a real int8 build, not a what-if.")
@click.option("--input-value", "input_value", multiple=True,
              help=_VALUE_HELP + " Bound in every model swept, as --input-shape is.")
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


@cli.command("explore")
@_limit_option
@click.argument("model", default="seed_pipeline")
@click.option("-o", "--output", default="explorer.html", show_default=True, help="Page to write.")
@click.option("--serve", is_flag=True, help="Also serve the page on 127.0.0.1 until ctrl-c.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port for --serve.")
@click.option("--target", default=None, help="The target the page opens on (a name or a .toml "
              "file; default npu-generic), at the model's own precision where it runs there.")
def explore_cmd(model: str, output: str, serve: bool, port: int, target: str | None) -> None:
    """Write the interactive roofline explorer for MODEL (default: the seeds' toy pipeline)."""
    from opfuse.report import explorer

    if serve:
        explorer.check_port(port)  # before anything is written
    _refuse_input(model, output)
    if target is not None:
        api.get_target(target)  # an unknown target is one line before the page is built
    explorer.write_explorer(model, output, protect=(model,), target=target)
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
    try:  # in a context of its own: --limit holds for this command only (tests run many)
        contextvars.copy_context().run(cli.main, args=argv, prog_name="opfuse",
                                       standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except OpfuseError as exc:  # one line, whatever names the model holds (\n in a node name...)
        kind = "not supported" if exc.exit_code == Unsupported.exit_code else "error"
        click.echo(f"opfuse: {kind}: {for_terminal(exc)}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # protobuf's EncodeError: a model past 2 GiB at a step that writes it
        if type(exc).__name__ != "EncodeError":
            raise
        click.echo("opfuse: error: the model is over protobuf's 2 GiB limit for one message, "
                   "which this step must write whole (import and analyze read such models)", err=True)
        sys.exit(2)


def _print_validation(report: ValidationReport) -> None:
    from opfuse.measure.validate.ort import format_report  # here: `opfuse --help` stays light

    console.say(format_report(report))


if __name__ == "__main__":
    main()
