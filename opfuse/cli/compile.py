"""`opfuse compile`: canonicalize and fuse a model for a target, write ONNX or C (with
--precision int8, quantized first: cli/quantize.py)."""

from __future__ import annotations

import sys

import click

from opfuse.cli.common import (
    SHAPE_HELP,
    api,
    cli,
    limit_option,
    print_validation,
    refuse_input,
    value_option,
)
from opfuse.cli.quantize import Int8Args, compile_int8, quantize_options
from opfuse.errors import OpfuseError
from opfuse.report import console


@cli.command("compile")
@limit_option
@click.argument("model")
@click.option("-o", "--output", required=True,
              help="The optimized ONNX file, or with --emit c the folder for the C project.")
@click.option("--target", default=api.DEFAULT_TARGET, show_default=True, help="Target profile.")
@click.option("--input-shape", "input_shape", multiple=True, help=SHAPE_HELP)
@value_option
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
    io: str = "float",
) -> None:
    """Canonicalize and fuse MODEL (a path or a built-in name) for a target; write ONNX or C."""
    int8 = Int8Args(calibration, eval_data, method, per_tensor, keep_float, io)
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
    refuse_input(model, output)
    if precision == "int8":
        for data in (calibration, eval_data):
            if data is not None:
                refuse_input(data, output)
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
        print_validation(report)
        if not report.ok:
            sys.exit(1)
