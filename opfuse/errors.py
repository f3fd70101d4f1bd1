"""The one error type users see: a one-line message, exit status 2, no traceback."""

from __future__ import annotations


class OpfuseError(Exception):
    """Bad input (file, node, dimension, option). The CLI prints ``opfuse: <message>`` and exits 2."""

    exit_code = 2


class Unsupported(OpfuseError):
    """A valid model opfuse cannot build yet (an op without a C kernel): not the user's mistake, so
    its own exit status, 3, and the CLI says ``not supported`` rather than ``error``."""

    exit_code = 3
