"""The built-in model library: builders that write ONNX, the seeds' examples and common edge nets.

Every builder is deterministic (seeded weights; the same bytes on every call), writes opset 17 /
IR 8, float32, with node names set, and leaves BatchNormalization unfused with the running
statistics, gamma and beta a training framework's export would carry. Every command that takes a
model path also accepts one of these names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import onnx

from opfuse.errors import OpfuseError
from opfuse.models.kws import ds_cnn
from opfuse.models.mobilenet import mobilenet_v2
from opfuse.models.resnet import resnet18
from opfuse.models.seeds import seed_block, seed_pipeline
from opfuse.models.transformer import tiny_transformer


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    build: Callable[[], onnx.ModelProto]


def _spec(name: str, description: str, builder: Callable[[], onnx.ModelProto]) -> ModelSpec:
    @lru_cache(maxsize=1)
    def serialized() -> bytes:  # building runs the net in numpy for BN statistics: do it once
        return builder().SerializeToString(deterministic=True)

    def build() -> onnx.ModelProto:
        proto = onnx.ModelProto()
        proto.ParseFromString(serialized())
        return proto  # a fresh object every call: callers may modify it

    build.__doc__ = builder.__doc__
    build.__name__ = builder.__name__
    build.__wrapped__ = builder  # type: ignore[attr-defined]  # the uncached builder (tests)
    return ModelSpec(name, description, build)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _spec("seed_block", "depthwise-separable block (dw 3x3 + BN + ReLU6, pw 1x1 to 64 + BN + "
              "ReLU6) on 1x32x56x56", seed_block),
        _spec("seed_pipeline", "Conv + BN + ReLU + Conv + MaxPool on 1x16x256x256", seed_pipeline),
        _spec("mobilenet_v2", "MobileNetV2 1.0, 1x3x224x224, 1000 classes", mobilenet_v2),
        _spec("resnet18", "ResNet-18, 1x3x224x224, 1000 classes", resnet18),
        _spec("ds_cnn", "DS-CNN keyword spotting (MLPerf Tiny), 1x1x49x10 MFCC, 12 classes", ds_cnn),
        _spec("tiny_transformer", "2-layer pre-LN transformer encoder, seq 64, dim 64, 4 heads, "
              "GELU via Erf", tiny_transformer),
    )
}


def build_model(name: str) -> onnx.ModelProto:
    """The ONNX model of built-in ``name`` (a fresh ModelProto)."""
    spec = MODELS.get(name)
    if spec is None:
        raise OpfuseError(f"unknown built-in model '{name}' (known: {', '.join(MODELS)})")
    return spec.build()


__all__ = ["MODELS", "ModelSpec", "build_model"]
