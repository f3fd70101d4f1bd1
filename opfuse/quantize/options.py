"""The quantization options ``opfuse compile --precision int8`` shares with ``opfuse quantize``
(click only: ``opfuse --help`` stays light)."""

from __future__ import annotations

import click


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
    ]):
        fn = opt(fn)
    return fn
