"""C backend: C99 source with fused kernels and one static arena. Building, running and checking
that C is measurement (``opfuse.measure``), below the compiler."""

from __future__ import annotations

from opfuse.backends.c.emit import CEmitted, c_schedule, emit_c, generate
from opfuse.backends.c.kernels import COVERED

__all__ = [
    "COVERED",
    "CEmitted",
    "c_schedule",
    "emit_c",
    "generate",
]
