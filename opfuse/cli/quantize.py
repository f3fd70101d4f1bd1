"""`opfuse quantize`, and what `opfuse compile --precision int8` does once its options are
parsed: quantize, write, print the accuracy report (docs/quantize.md)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from opfuse.cli.common import SHAPE_HELP, api, cli, limit_option, refuse_input, write_json
from opfuse.errors import OpfuseError
from opfuse.report import console
from opfuse.safe_text import for_terminal

IO_CHOICES = ("float", "int8")  # as opfuse.quantize.int8_io's (that module imports onnx)
IO_HELP = ("int8: the model takes and returns int8 (the TFLite converter's inference_input_type/"
           "inference_output_type=int8): no float input or output in the arena; the scale and "
           "zero point of each are printed and in --json's \"io\".")
QDQ_FILE = "model.qdq.onnx"  # the QDQ model written beside the int8 C by compile --precision int8


@dataclass(frozen=True)
class Int8Args:
    """``compile --precision int8``'s quantization options."""

    calibration: str | None
    eval_data: str | None = None
    method: str = "minmax"
    per_tensor: bool = False
    keep_float: tuple[str, ...] = ()
    io: str = "float"

    def refuse_without_calibration(self, precision: str | None) -> None:
        """Options that only an int8 build reads, given without one, are one line each."""
        if precision != "int8":
            given = [o for o, v in (("--calibration", self.calibration), ("--eval", self.eval_data),
                                    ("--method", self.method != "minmax"),
                                    ("--per-tensor", self.per_tensor),
                                    ("--keep-float", self.keep_float),
                                    ("--io", self.io != "float")) if v]
            if given:
                raise OpfuseError(f"{given[0]} quantizes the model: use it with --precision int8 "
                                  "--calibration DATA")
        elif self.calibration is None:
            raise OpfuseError("--precision int8 quantizes the float model: give --calibration "
                              "DATA (an .npz or a folder of .npy files, docs/quantize.md)")


def eval_phrase(done, calibration: str, eval_data: str | None) -> str:  # noqa: ANN001 (Quantized)
    """What the report was computed on, said as the terminal says it."""
    if done.eval_held_out:
        return (f"{done.evaluation.count} held-out samples (the last quarter of {calibration}, "
                "not calibrated on)")
    return f"{done.evaluation.count} samples of {eval_data}"


def print_quantized(done, model: str, target: str, calibration: str,  # noqa: ANN001 (Quantized)
                    eval_data: str | None) -> None:
    """The summary line, the accuracy table, collapsed ranges and what stayed float."""
    from opfuse.quantize.accuracy import format_report

    console.say(f"quantized {for_terminal(model)} for {for_terminal(target)}: "
                f"{len(done.placement.tensors)} activation tensors ({done.method}), weights "
                f"{'per channel' if done.per_channel else 'per tensor'}, calibrated on "
                f"{done.calibration.count} samples")
    if done.kept_float:
        console.say("kept float (a float island between DQ and Q): "
                    + ", ".join(for_terminal(k) for k in done.kept_float))
    console.say(f"accuracy vs the float model on {for_terminal(eval_phrase(done, calibration, eval_data))}:")
    console.say(format_report(done.accuracy))
    for c in done.collapsed:
        console.say(f"warning: kernel {c.index} ({for_terminal(c.kernel)}): the range of "
                    f"{for_terminal(c.tensor)} collapsed (constant {c.value:g} on every "
                    "calibration sample); its scale is widened to hold 0, not zero")
    if done.placement.float_ops:
        console.say("left float (no int8 form): " + ", ".join(
            sorted({for_terminal(op) for op in done.placement.float_ops})))
    if done.int8_io:
        console.say("int8 inputs and outputs (--io int8): feed and read them with these:")
        for t in done.io:
            console.say(f"  {t.role} {for_terminal(t.name)}: {t.describe()}")


def compile_quantized(done):  # noqa: ANN001, ANN201 (Quantized -> CompileResult)
    """The QDQ model compiled for the float model's target, as ``opfuse compile OUT.onnx`` would
    (through a file: the frontends read paths)."""
    import onnx

    from opfuse import api

    with tempfile.TemporaryDirectory(prefix="opfuse-int8-") as tmp:
        path = Path(tmp) / QDQ_FILE
        onnx.save(done.proto, path)
        result = api.compile(str(path), target=done.result.target)
    return result


def compile_int8(model: str, output: str, target: str, input_shape: tuple[str, ...],
                 args: Int8Args, *, fuse: bool, cascades: bool, prefix: str, force: bool,
                 check: bool) -> int:
    """``compile MODEL --emit c --precision int8 --calibration DATA``: quantize, compile the QDQ
    model, write the C with the QDQ model beside it (``model.qdq.onnx``) only once both
    succeeded; with ``check`` the C against the float model. The exit status."""
    from opfuse import api

    with console.progress(f"quantizing {model} for {target}"):
        result = api.compile(model, target=target, input_shape=input_shape)
        done = api.quantize(result, args.calibration, method=args.method,
                            per_channel=not args.per_tensor, evaluation=args.eval_data,
                            keep_float=args.keep_float, io=args.io)
        qdq = compile_quantized(done)
        emitted = api.emit_c(qdq, output, fuse=fuse, cascades=cascades, prefix=prefix,
                             force=force, extra_files={QDQ_FILE: done.proto.SerializeToString()})
    print_quantized(done, model, target, args.calibration, args.eval_data)
    click.echo(f"int8 C: {emitted.kernels} kernels, arena {emitted.arena_bytes:,} bytes "
               f"({prefix.upper()}_ARENA_BYTES), stack scratch {emitted.stack_scratch_bytes:,} "
               f"bytes, weights {emitted.weights_bytes:,} bytes")
    click.echo(console.cascades_line(emitted.cascades, not cascades or not fuse))
    click.echo(f"wrote {for_terminal(output)} (with {QDQ_FILE}, the QDQ model the C computes: "
               f"opfuse validate {for_terminal(str(Path(output) / QDQ_FILE))} --backend c)")
    if not check:
        return 0
    from opfuse.measure.validate.c_accuracy import c_accuracy, format_c_accuracy

    with console.progress("building the int8 C and running it beside the float model"):
        measured = c_accuracy(done, qdq, fuse=fuse, cascades=cascades)
    console.say(format_c_accuracy(measured, eval_phrase(done, args.calibration, args.eval_data)))
    return 0 if measured.ok else 1


def quantize_options(fn):  # noqa: ANN001, ANN202 (a click decorator)
    """compile --precision int8's quantization options (as opfuse quantize's)."""
    for opt in reversed([
        click.option("--calibration", metavar="DATA", help="With --precision int8: .npz with one "
                     "array per graph input (leading sample axis), or a folder of NAME.npy."),
        click.option("--eval", "eval_data", metavar="DATA", help="With --precision int8: samples "
                     "for the accuracy report and --check (default: the last quarter of "
                     "--calibration, not calibrated on)."),
        click.option("--method", default="minmax", show_default=True, metavar="METHOD",
                     help="With --precision int8: as opfuse quantize --method."),
        click.option("--per-tensor", is_flag=True, help="With --precision int8: one weight "
                     "scale per tensor."),
        click.option("--keep-float", "keep_float", multiple=True, metavar="NODE", help="With "
                     "--precision int8: leave this kernel float (repeatable)."),
        click.option("--io", "io", type=click.Choice(IO_CHOICES), default="float",
                     show_default=True, help="With --precision int8: as opfuse quantize --io."),
    ]):
        fn = opt(fn)
    return fn


@cli.command("quantize")
@limit_option
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
@click.option("--io", "io", type=click.Choice(IO_CHOICES), default="float", show_default=True,
              help=IO_HELP)
@click.option("--input-shape", "input_shape", multiple=True, help=SHAPE_HELP)
@click.option("--json", "json_dest", metavar="PATH|-", help="Write the accuracy report as JSON.")
@click.option("--html", "html_dest", metavar="PATH", help="Write the accuracy report as a page.")
def quantize_cmd(model: str, output: str, calibration: str, eval_data: str | None, target: str,
                 method: str, per_tensor: bool, input_shape: tuple[str, ...],
                 json_dest: str | None, keep_float: tuple[str, ...] = (),
                 html_dest: str | None = None, io: str = "float") -> None:
    """Quantize a float MODEL to int8 QDQ ONNX at the boundaries of the kernels opfuse fuses for
    the target; print its accuracy against the float model."""
    refuse_input(model, output, json_dest, html_dest)
    for data in (calibration, eval_data):
        if data is not None:
            refuse_input(data, output, json_dest, html_dest)
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
                            evaluation=eval_data, keep_float=keep_float, io=io)
        api.save(done.proto, output, protect=model)  # only once everything has succeeded
    if html_dest:
        from opfuse.report.quantize_page import write_quantize_page

        write_quantize_page(done.to_json(), html_dest, protect=(model, calibration, eval_data))
    if json_dest:
        write_json(done.to_json(), json_dest, model)
        if json_dest == "-":
            return
    print_quantized(done, model, target, calibration, eval_data)
    console.say(f"wrote {for_terminal(output)}" + (f" and {for_terminal(html_dest)}"
                                                   if html_dest else ""))
