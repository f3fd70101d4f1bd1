"""What every `opfuse` command shares: the command group, the lazy API, the options several
commands take (--limit, --input-shape, --input-value) and the output guards."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from opfuse.output import check_output, write_file
from opfuse.report import console
from opfuse.targets import DEFAULT_TARGET

if TYPE_CHECKING:
    from opfuse.measure.validate.ort import ValidationReport


class LazyApi:
    """opfuse.api, imported on first use: `opfuse --help`, `models` and `targets` then start
    without loading onnx_ir, onnxscript or onnxruntime (benchmarks/startup.py measures it)."""

    DEFAULT_TARGET = DEFAULT_TARGET  # read by the option decorators at import

    def __getattr__(self, name: str):
        from opfuse import api as module

        return getattr(module, name)


api = LazyApi()

SHAPE_HELP = ("Bind a dynamic input: NAME=1x3x224x224 (repeatable). A leading symbolic dim is 1. "
               "Also gives the shape of any value inference cannot know (a custom op's output).")
VALUE_HELP = ("Bind a graph input to a constant: NAME=VALUE, a scalar or comma-separated values "
               "(repeatable), e.g. sr=16000; an If on it folds to the branch it takes, and the "
               "reference run is fed the same value.")
value_option = click.option("--input-value", "input_value", multiple=True, help=VALUE_HELP)


def apply_limits(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> None:
    if specs:
        from opfuse.frontends.limits import parse_limits, set_limits

        set_limits(parse_limits(specs))


limit_option = click.option(
    "--limit", "limits", multiple=True, metavar="NAME=SIZE", expose_value=False,
    callback=apply_limits, help="Raise a size limit (repeatable): constant=256MiB, "
    "constants_total=1GiB, activation=2GiB, extent=65536 are the defaults.")


def write_json(data: dict, dest: str, model: str) -> None:
    write_file(dest, json.dumps(data, indent=2) + "\n", protect=(model,))


def refuse_input(model: str, *outputs: str | None) -> None:
    """Before any work: no output option may name the input model (opfuse/output)."""
    for dest in outputs:
        if dest is not None:
            check_output(dest, (model,))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="opfuse")
def cli() -> None:
    """opfuse: operator-fusion compiler and analyzer for edge inference."""


def print_validation(report: ValidationReport) -> None:
    from opfuse.measure.validate.ort import format_report  # here: `opfuse --help` stays light

    console.say(format_report(report))
