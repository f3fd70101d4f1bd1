"""Measurement: running, timing and comparing what the compiler produced (docs/architecture.md,
"Measurement"). It sits below the compiler in the import graph: it may import every compiler stage,
and no compiler stage imports it; only ``opfuse.cli`` and ``opfuse.api`` (the top) do."""
