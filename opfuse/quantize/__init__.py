"""Post-training int8 quantization calibrated at the fused kernels' boundaries (docs/quantize.md).

data.py (calibration samples), placement.py (where Q/DQ go), ranges.py (calibration),
accuracy.py (the report), int8_io.py (--io int8), driver.py (the stage), command.py and options.py (the commands).
``quantize`` and ``Quantized`` load on first use, so the CLI's option declarations
(options.py) import no onnx."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opfuse.quantize.driver import Quantized, quantize

__all__ = ["Quantized", "quantize"]


def __getattr__(name: str):  # noqa: ANN202
    if name in __all__:
        from opfuse.quantize import driver

        return getattr(driver, name)
    raise AttributeError(name)
