"""Target-independent canonicalization: algebraic rewrites that preserve the model's outputs."""

from __future__ import annotations

import onnx_ir as ir


def canonicalize(model: ir.Model) -> dict[str, int]:
    """Rewrite ``model`` in place; return how often each pass fired (pass name -> count)."""
    return {}
