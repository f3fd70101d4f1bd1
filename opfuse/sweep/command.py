"""``opfuse sweep``: what the command does once its options are parsed (``opfuse.cli`` only
declares them). Writes the output file (and ``--html``), prints a one-line summary, and returns
the exit status: 0, or 130 after Ctrl-C with what was done written."""

from __future__ import annotations

from dataclasses import dataclass

import click

from opfuse.errors import OpfuseError
from opfuse.safe_text import for_terminal
from opfuse.sweep.output import PartialWriter, done_rows, output_format, write_rows
from opfuse.sweep.progress import SweepProgress
from opfuse.sweep.run import default_jobs, plan, protect_inputs, run


@dataclass(frozen=True)
class SweepArgs:
    models: tuple[str, ...]
    targets: str = "all"
    precisions: str = "fp32,fp16,int8"
    emulate: bool = False
    output: str | None = None
    html: str | None = None
    jobs: int | None = None
    ray: str | None = None
    resume: bool = False
    quiet: bool = False
    timeout_s: float = 300.0
    input_shape: tuple[str, ...] = ()
    calibration: str | None = None  # DATA: int8 rows of float models are real int8 builds
    input_value: tuple[str, ...] = ()


def _check(args: SweepArgs) -> None:
    if args.output is not None:
        output_format(args.output)
    if args.resume and args.output is None:
        raise OpfuseError("--resume reads the rows already done from the output: give -o")
    if args.output is None and args.html is None:
        raise OpfuseError("sweep writes its rows to a file: give -o results.parquet|.csv|.json "
                          "and/or --html sweep.html")
    if args.html is not None and not args.html.lower().endswith((".html", ".htm")):
        raise OpfuseError(f"{args.html}: --html writes a page: name it .html")


def sweep_command(args: SweepArgs) -> int:
    from opfuse.sweep.inputs import model_refs, parse_precisions, target_refs

    _check(args)
    precisions = parse_precisions(args.precisions)
    calibration = None
    if args.calibration is not None:
        from opfuse.sweep.inputs import calibration_ref

        if "int8" not in precisions:
            raise OpfuseError("--calibration quantizes the int8 rows: add int8 to --precisions")
        for out in (args.output, args.html):
            if out is not None:
                from opfuse.output import check_output

                check_output(out, (args.calibration,))
        calibration = calibration_ref(args.calibration)  # unreadable, NaN...: one line, exit 2
    targets = target_refs(args.targets)
    models = model_refs(args.models)
    protect_inputs(models, args.output, args.html)
    if args.output is not None and args.output.lower().endswith(".parquet"):
        from opfuse.sweep.output import arrow_schema

        arrow_schema()  # a missing pyarrow is said before anything runs
    if args.ray is not None:
        from opfuse.sweep.ray_exec import import_ray, require_token

        require_token(args.ray)  # before Ray is imported: it reads its auth mode when it loads
        import_ray()
    previous = done_rows(args.output) if args.resume else {}
    if args.input_shape:
        from opfuse.frontends import parse_input_shapes

        parse_input_shapes(list(args.input_shape))  # a malformed binding is said before anything runs
    if args.input_value:
        from opfuse.frontends.input_values import parse_input_value_specs

        parse_input_value_specs(args.input_value)  # as --input-shape: malformed is said up front
    tasks = plan(models, targets, precisions, args.emulate, args.timeout_s, set(previous),
                 args.input_shape, calibration, args.input_value)
    total = sum(len(t.precisions) for t in tasks)
    partial = PartialWriter(args.output, args.resume) if args.output is not None else None
    with SweepProgress(total, args.quiet) as bar:
        def on_rows(rows: tuple[dict, ...]) -> None:
            if partial is not None:
                for row in rows:
                    partial.add(row)
            bar.advance(rows)

        try:
            outcome = run(tasks, args.jobs or default_jobs(), args.ray, previous, on_rows)
        except BaseException:
            if partial is not None:
                partial.close(remove=False)  # --resume picks it up
            raise
    if args.output is not None:
        write_rows(args.output, list(outcome.rows))
        partial.close(remove=True)
    if args.html is not None:
        from opfuse.sweep.page import write_page

        write_page(list(outcome.rows), args.html)
    skipped = sum(1 for r in outcome.rows if r["status"] == "skipped")
    where = " and ".join(for_terminal(str(p)) for p in (args.output, args.html) if p)
    click.echo(f"sweep: {outcome.new} rows computed ({outcome.failed} failed), "
               f"{len(outcome.rows) - outcome.new} kept from before, {skipped} skipped in all; "
               f"wrote {where}" + (" (interrupted: --resume finishes it)"
                                    if outcome.interrupted else ""))
    return 130 if outcome.interrupted else 0
