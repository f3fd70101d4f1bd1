"""C backend: C99 source with fused kernels and one static arena, a host runner and a benchmark."""

from __future__ import annotations

from opfuse.backends.c.check import bench, format_bench, validate_c
from opfuse.backends.c.emit import CEmitted, c_schedule, emit_c, generate
from opfuse.backends.c.kernels import COVERED
from opfuse.backends.c.runner import build_executable, build_shared, run_c, run_executable

__all__ = [
    "COVERED",
    "CEmitted",
    "bench",
    "build_executable",
    "build_shared",
    "c_schedule",
    "emit_c",
    "format_bench",
    "generate",
    "run_c",
    "run_executable",
    "validate_c",
]
