"""Post-training int8 quantization calibrated at the fused kernels' boundaries (docs/quantize.md).

data.py (calibration samples), placement.py (where Q/DQ go), ranges.py (calibration),
accuracy.py (the report), driver.py (the stage)."""

from opfuse.quantize.driver import Quantized, quantize

__all__ = ["Quantized", "quantize"]
