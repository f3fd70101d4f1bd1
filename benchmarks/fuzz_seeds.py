"""The fuzzer's seed models (benchmarks/fuzz.py mutates them): the shared real models of
``../shared/models`` that are small enough to run many times, and built-in ones that exist in
every clone (opfuse's built-ins and exporter-style models for ONNX, a small int8 net built with
tests/helpers/tflite_builder.py for TFLite).
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
# Small files with full-size networks (ResNet-50, DenseNet-121, Inception at 224x224, weights from
# ConstantOfShape): `--emit c` of one takes minutes on a loaded machine, so only with --all
HEAVY_SHARED = ("light_resnet50.onnx", "light_densenet121.onnx", "light_inception_v2.onnx")
# Full-size networks in small files that stay seeds, but whose `validate --backend c` (a C build and
# 20 runs at 224x224) outlasts the timeout on a loaded machine: the other commands only
NO_VALIDATE = ("light_squeezenet.onnx", "light_shufflenet.onnx")


def seed_protos(names: tuple[str, ...] = SMALL_SEEDS) -> dict[str, bytes]:
    """Serialized built-in ONNX seed models by name."""
    from opfuse import models
    from tests.helpers import exports

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
            if everything or (p.stat().st_size <= SHARED_MAX_BYTES and p.name not in HEAVY_SHARED)}


def builtin_tflite() -> bytes:
    """An int8 CONV_2D -> DEPTHWISE_CONV_2D net, so a clone without ../shared still fuzzes the
    TFLite reader (TFLite Micro's Python interpreter crashed on a pool and on a depthwise conv without bias
    from the builder)."""
    from tests.helpers import tflite_builder as tb

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


# --- found cases kept as regression files (tests/data/fuzz/) ----------------------------------
# A case from a built-in seed is kept as its bytes (``NAME.onnx`` / ``NAME.tflite``); one from a
# shared model as the edits that make it from that model (``NAME.tflite.patch.json``), so the
# repository holds no copy of other people's models (../shared/models/SOURCES.md) and a few bytes
# per case; such a case replays where ../shared exists.

PATCH_SUFFIX = ".patch.json"


def save_case(folder: Path, stem: str, fmt: str, seed_name: str, seed: bytes, data: bytes) -> Path:
    import difflib
    import json

    if not (SHARED / fmt / seed_name).is_file():
        path = folder / f"{stem}.{fmt}"
        path.write_bytes(data)
        return path
    if len(data) <= len(seed) and sum(a != b for a, b in zip(data, seed, strict=False)) < 4096:
        edits = [[pos, pos + 1, f"{data[pos]:02x}"] for pos in range(len(data))
                 if data[pos] != seed[pos]]  # a flatbuffer mutation keeps every offset
        if len(data) < len(seed):
            edits.append([len(data), len(seed), ""])
    else:  # a re-serialized proto: bytes moved
        matcher = difflib.SequenceMatcher(None, seed, data, autojunk=False)
        edits = [[i1, i2, data[j1:j2].hex()] for tag, i1, i2, j1, j2 in matcher.get_opcodes()
                 if tag != "equal"]
    path = folder / f"{stem}.{fmt}{PATCH_SUFFIX}"
    path.write_text(json.dumps({"seed": seed_name, "edits": edits}) + "\n")
    return path


def load_case(path: Path) -> tuple[bytes, str] | None:
    """(bytes, suffix) of a kept case; None when it patches a shared model that is absent."""
    import json

    if not path.name.endswith(PATCH_SUFFIX):
        return path.read_bytes(), path.suffix
    spec = json.loads(path.read_text())
    fmt = path.name[: -len(PATCH_SUFFIX)].rsplit(".", 1)[1]
    seed = SHARED / fmt / spec["seed"]
    if not seed.is_file():
        return None
    buf = bytearray(seed.read_bytes())
    for start, end, text in reversed(spec["edits"]):  # from the end: earlier offsets hold
        buf[start:end] = bytes.fromhex(text)
    return bytes(buf), f".{fmt}"
