"""``seed_pipeline`` at other spatial sizes, for the roofline explorer's tensor-size control.

The pipeline's weights do not depend on the spatial size (3x3 convolutions, 16 channels, a 2x2
pool), so a sized copy is the built-in ``seed_pipeline`` with its input and output dims rewritten;
shapes in between are inferred on import. At 256x256 it is byte-for-byte the built-in model, so
the explorer's default configuration is exactly what ``opfuse analyze seed_pipeline`` measures.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from opfuse.errors import OpfuseError

SIZES: tuple[int, ...] = (64, 128, 256, 512)  # square spatial sizes the explorer offers
DEFAULT_SIZE = 256  # the built-in seed_pipeline


def seed_pipeline_sized(size: int = DEFAULT_SIZE) -> onnx.ModelProto:
    """Conv -> BN -> ReLU -> Conv -> MaxPool on 1x16x``size``x``size`` (``size`` even, >= 4)."""
    from opfuse.models import build_model

    if size < 4 or size % 2:
        raise OpfuseError(f"seed_pipeline size must be an even number >= 4; got {size}")
    proto = build_model("seed_pipeline")
    if size == DEFAULT_SIZE:
        return proto
    proto.graph.ClearField("value_info")
    _set_hw(proto.graph.input[0], size)
    _set_hw(proto.graph.output[0], size // 2)
    proto.graph.name = f"seed_pipeline_{size}"
    return proto


def _set_hw(value: onnx.ValueInfoProto, hw: int) -> None:
    dims = value.type.tensor_type.shape.dim
    dims[2].dim_value = hw
    dims[3].dim_value = hw


def write_sized(size: int, folder: Path | None = None) -> Path:
    """Write the sized model to ``folder`` (a fresh temporary folder by default); return its path."""
    out = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="opfuse-sized-"))
    path = out / f"seed_pipeline_{size}.onnx"
    onnx.save(seed_pipeline_sized(size), path)
    return path
