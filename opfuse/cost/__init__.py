"""Cost: bytes, FLOPs, arithmetic intensity, roofline time, dispatch overhead and energy per kernel
and in total (docs/architecture.md, "Traffic accounting" and "Roofline"). ``roofline.py`` states the level model."""

from __future__ import annotations

from opfuse.cost.precision import BYTES_PER_ELEMENT, model_precision, resolve_precision
from opfuse.cost.roofline import cost_model
from opfuse.cost.types import CostSide, KernelCost

__all__ = [
    "BYTES_PER_ELEMENT",
    "CostSide",
    "KernelCost",
    "cost_model",
    "model_precision",
    "resolve_precision",
]
