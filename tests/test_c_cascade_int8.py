"""int8 members of cascaded C kernels (opfuse/backends/c/int8/cascade.py): rows streamed through
int8 ring buffers are bit-identical to TFLite Micro (tflite rounding) on chains written with
tests/helpers/tflite_builder.py and on every shared int8 .tflite with cascades, and within one step of
onnxruntime's int8 execution (onnx rounding, QDQ from onnxruntime's quantizer) while equal to the
layer-by-layer C bit for bit. The arena is analyze's peak with cascades."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite_micro")
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

from opfuse.analysis import analyze  # noqa: E402
from opfuse.backends.c import emit_c  # noqa: E402
from opfuse.measure.run.host import (  # noqa: E402
    CModel,  # noqa: E402
    build_executable,
    build_shared,
    manifest,
    run_executable,
)
from opfuse.measure.validate.tflite_reference import TfliteReference  # noqa: E402
from tests.helpers.c_cascade import arena_of, bit_exact, run_cascaded  # noqa: E402
from tests.helpers.int8_chain import Chain  # noqa: E402

# --- chains written as .tflite (tests/helpers/int8_chain.py) --------------------------------

def _chains() -> dict[str, Chain]:
    return {
        "inverted_residual": Chain(17, 8, 1).save("x").conv(24, 1, act="relu6")
        .conv(24, 3, act="relu6", depthwise=True).conv(8, 1).add("x"),
        "stride_2_and_odd_size": Chain(23, 6, 2).conv(12, 3, 2, act="relu")
        .conv(12, 3, depthwise=True, act="relu").conv(16, 1)
        .conv(16, 3, 2, "VALID", depthwise=True),
        "dilated_valid": Chain(19, 8, 3).conv(12, 1, act="relu")
        .conv(12, 3, d=2, padding="VALID", depthwise=True).conv(8, 3, act="relu6"),
        "conv_max_pool": Chain(20, 8, 4).conv(12, 3, act="relu").pool("MAX_POOL_2D", 2, 2)
        .conv(8, 3, act="relu"),
        "conv_average_pool_same": Chain(21, 8, 5).conv(12, 3, act="relu")
        .pool("AVERAGE_POOL_2D", 3, 2, "SAME").conv(8, 1),
        # 16k output channels on short rows: the channel-vectorized row core, padded, in rings
        "channel_lanes": Chain(13, 8, 6).conv(16, 1, act="relu").conv(32, 3, act="relu6")
        .conv(16, 3, 2),
    }


@pytest.mark.parametrize("case", sorted(_chains()))
def test_int8_cascade_is_bit_exact_with_tflite_micro(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(_chains()[case].build())
    result, _ = run_cascaded(path, tmp_path / "c")
    ops = {op for c in result.partition.cascades for op in c.ops}
    if "pool" in case:
        assert {"MaxPool", "AveragePool"} & ops, ops
    if case == "inverted_residual":
        assert "Add" in ops, ops
    bit_exact(path, tmp_path / "c")
    assert arena_of(tmp_path / "c") == analyze(result).after.plan.peak_bytes


def test_int8_cascade_is_sanitizer_clean(tmp_path: Path) -> None:
    path = tmp_path / "ir.tflite"
    path.write_bytes(_chains()["inverted_residual"].build())
    folder = tmp_path / "c"
    run_cascaded(path, folder)
    exe = build_executable(folder, ["-O1", "-g", "-fsanitize=address,undefined",
                                    "-fno-sanitize-recover=all"], name="asan")

    info = manifest(folder)
    ref = TfliteReference(path)
    feeds = ref.random_inputs(0)
    got, proc = run_executable(exe, info, feeds, env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert "runtime error" not in proc.stderr
    for name, value in ref.run(feeds).items():
        assert np.array_equal(got[name].reshape(value.shape), value)


# --- onnx rounding: QDQ ONNX from onnxruntime's quantizer --------------------------------------

@pytest.mark.parametrize(("name", "activation"), [("inverted_residual", "int8"),
                                                  ("conv_then_pool", "int8"),
                                                  ("inverted_residual", "uint8")])
def test_int8_cascade_in_onnx_rounding(name: str, activation: str, tmp_path: Path) -> None:
    from opfuse.measure.validate.c_int8 import validate_c_int8
    from tests.helpers.cascade import NUMERIC_CHAINS, conv_chain
    from tests.helpers.quant import quantize

    layers, residual, size = NUMERIC_CHAINS[name]
    path = quantize(conv_chain(layers, size=size, residual=residual), tmp_path, "qdq",
                    per_channel=True, activation=activation, samples=4)
    result, _ = run_cascaded(path, tmp_path / "c")
    assert result.optimized.meta["opfuse.rounding"] == "onnx"
    report = validate_c_int8(result, trials=3, steps=1, cascades=True)
    assert report.ok, "\n".join(report.notes)
    # and the very integers of the layer-by-layer C
    emit_c(result, tmp_path / "plain", cascades=False)
    build_shared(tmp_path / "c")
    build_shared(tmp_path / "plain")
    cascaded, plain = CModel(tmp_path / "c"), CModel(tmp_path / "plain")
    rng = np.random.default_rng(0)
    x = {result.optimized.graph.inputs[0].name:
         rng.standard_normal((1, 8, size, size)).astype(np.float32)}
    a, b = cascaded.run(x), plain.run(x)
    for key in b:
        assert np.array_equal(a[key], b[key])
