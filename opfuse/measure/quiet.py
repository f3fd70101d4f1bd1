"""Native libraries that print to the process's stderr (fd 2) behind Python's back: LiteRT says
"INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on every interpreter it builds, which
would land in the middle of validate's, --check's and sweep's output. ``native_stderr_silenced``
points fd 2 at /dev/null for the duration (Python's own exceptions still carry every error)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2 (an embedded interpreter): nothing to silence
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
