"""The `opfuse` command: parses options, calls the pipeline, prints. No logic lives here: each
command's options are declared in the module named after it and its work is a stage's (sweep,
quantize) or the API's. ``main`` turns every OpfuseError into one line and its exit status."""

from __future__ import annotations

import contextvars
import sys

import click

from opfuse.cli import analyze, catalog, compile, explore, quantize, sweep, validate  # noqa: F401
from opfuse.cli.common import cli
from opfuse.errors import OpfuseError, Unsupported
from opfuse.safe_text import for_terminal

__all__ = ["cli", "main"]


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
