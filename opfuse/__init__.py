"""opfuse: operator-fusion compiler and analyzer for edge inference.

The public API is ``opfuse.api`` (load, compile, fuse, analyze, emit, save, validate, ...),
re-exported here.
"""

from __future__ import annotations

from opfuse import api as _api
from opfuse.api import *  # noqa: F403  (the public API, listed once in api.__all__)
from opfuse.errors import OpfuseError

__version__ = "0.1.0"

__all__ = [*_api.__all__, "OpfuseError"]
