"""The C flags the generated Makefile builds with (docs/architecture.md, "The C backend"). They
live with the compiler, not with the host runner, because the Makefile is compile-time output;
the runner (``opfuse.measure``) builds with the same ones."""

from __future__ import annotations

WARN = ("-Wall", "-Wextra", "-Werror")
BASE = ("-O3", "-std=c99", "-ffp-contract=fast")  # FMA: -std=c99 alone turns contraction off
