"""The fuzzer's seed models (benchmarks/fuzz.py mutates them): the shared real models of
``../shared/models`` that are small enough to run many times, and built-in ones that exist in
every clone (opfuse's built-ins and exporter-style models for ONNX, a small int8 net built with
tests/tflite_builder.py for TFLite).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "models"
SMALL_SEEDS = ("seed_block", "ds_cnn", "tiny_transformer", "paddle_style", "custom_op",
               "control_flow_if", "control_flow_loop", "control_flow_scan")
LARGE_SEEDS = ("seed_pipeline", "mobilenet_v2", "resnet18")
SHARED_MAX_BYTES = 300_000  # larger shared models (person_detect, vww_96) only with --all


def seed_protos(names: tuple[str, ...] = SMALL_SEEDS) -> dict[str, bytes]:
    """Serialized built-in ONNX seed models by name."""
    from opfuse import models
    from tests import exports

    builders: dict[str, Callable[[], onnx.ModelProto]] = {
        "paddle_style": exports.paddle_style,
        "custom_op": exports.custom_op,
        "control_flow_if": lambda: exports.control_flow("If"),
        "control_flow_loop": lambda: exports.control_flow("Loop"),
        "control_flow_scan": lambda: exports.control_flow("Scan"),
    }
    out = {}
    for name in names:
        proto = builders[name]() if name in builders else models.build_model(name)
        out[name] = proto.SerializeToString(deterministic=True)
    return out


def shared_seeds(fmt: str, everything: bool = False) -> dict[str, bytes]:
    """The shared real models of format ``fmt`` (all of them with ``everything``), by file name;
    empty when ../shared/models is absent."""
    folder = SHARED / fmt
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(folder.glob(f"*.{fmt}"))
            if everything or p.stat().st_size <= SHARED_MAX_BYTES}


def builtin_tflite() -> bytes:
    """An int8 CONV_2D -> DEPTHWISE_CONV_2D net, so a clone without ../shared still fuzzes the
    TFLite reader (TFLite Micro's Python interpreter crashed on a pool and on a depthwise conv without bias
    from the builder)."""
    from tests import tflite_builder as tb

    rng = np.random.default_rng(0)
    b = tb.TfliteBuilder()
    x = b.input("x", (1, 8, 8, 3), np.int8, scale=0.05, zero_point=-3)
    w1 = b.const("w1", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
                 scale=np.full(4, 0.01), zero_point=0, axis=0)
    b1 = b.const("b1", rng.integers(-50, 50, 4).astype(np.int32), scale=np.full(4, 5e-4), axis=0)
    c1 = b.tensor("c1", (1, 8, 8, 4), np.int8, scale=0.1, zero_point=5)
    b.op("CONV_2D", [x, w1, b1], [c1], "Conv2DOptions", Padding=tb.SAME, StrideH=1, StrideW=1,
         DilationHFactor=1, DilationWFactor=1, FusedActivationFunction=tb.RELU)
    w2 = b.const("w2", rng.integers(-127, 128, (1, 3, 3, 4)).astype(np.int8),
                 scale=np.full(4, 0.02), zero_point=0, axis=3)
    c2 = b.tensor("c2", (1, 4, 4, 4), np.int8, scale=0.1, zero_point=0)
    b2 = b.const("b2", rng.integers(-50, 50, 4).astype(np.int32), scale=np.full(4, 1e-3), axis=0)
    b.op("DEPTHWISE_CONV_2D", [c1, w2, b2], [c2], "DepthwiseConv2DOptions", Padding=tb.SAME,
         StrideH=2, StrideW=2, DepthMultiplier=1, DilationHFactor=1, DilationWFactor=1)
    b.output(c2)
    return b.build()


def seeds_for(fmt: str, everything: bool = False) -> dict[str, bytes]:
    """Every seed of format ``fmt`` ('onnx' or 'tflite'), by name."""
    if fmt == "tflite":
        return {"builtin_int8.tflite": builtin_tflite(), **shared_seeds("tflite", everything)}
    names = SMALL_SEEDS + (LARGE_SEEDS if everything else ())
    return {**seed_protos(names), **shared_seeds("onnx", everything)}
