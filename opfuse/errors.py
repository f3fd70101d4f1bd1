"""The one error type users see: a one-line message, exit status 2, no traceback."""

from __future__ import annotations


class OpfuseError(Exception):
    """Bad input (file, node, dimension, option). The CLI prints ``opfuse: <message>`` and exits 2."""

    exit_code = 2
