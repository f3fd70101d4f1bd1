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
from tests.helpers import qgraphs as q  # noqa: E402
from tests.helpers import tflite_builder as tb  # noqa: E402
from tests.helpers.c_cascade import arena_of, bit_exact, run_cascaded  # noqa: E402

# --- chains written as .tflite ----------------------------------------------------------------

class Chain:
    """An int8 NHWC chain in a TfliteBuilder: each layer appends one op to the current tensor."""

    def __init__(self, size: int, channels: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.b = tb.TfliteBuilder()
        self.h = self.w = size
        self.c = channels
        self.scale, self.zp = 0.05, int(self.rng.integers(-20, 20))
        self.cur = q.tensor(self.b, (1, size, size, channels), np.int8, self.scale, self.zp)
        self.b.inputs = [self.cur]
        self.saved: dict[str, tuple[int, float, int]] = {}

    def _out(self, k: int, s: int, d: int, padding: str) -> tuple[int, int]:
        if padding == "SAME":
            return -(-self.h // s), -(-self.w // s)
        ext = (k - 1) * d + 1
        return (self.h - ext) // s + 1, (self.w - ext) // s + 1

    def _next(self, oh: int, ow: int, oc: int, scale: float) -> int:
        zp = int(self.rng.integers(-10, 10))
        out = q.tensor(self.b, (1, oh, ow, oc), np.int8, scale, zp)
        self.h, self.w, self.c, self.scale, self.zp = oh, ow, oc, scale, zp
        return out

    def conv(self, oc: int, k: int, s: int = 1, padding: str = "SAME", d: int = 1,
             act: str | None = None, depthwise: bool = False) -> Chain:
        taps = k * k * (1 if depthwise else self.c)
        ws = self.rng.uniform(0.004, 0.02, oc).astype(np.float32)
        if depthwise:
            wt = self.rng.integers(-127, 128, (1, k, k, oc)).astype(np.int8)
            wi = q.tensor(self.b, wt.shape, np.int8, ws, 0, 3, wt)
            opts, code = q.dw_options((s, s), padding, oc // self.c, act, (d, d)), \
                "DEPTHWISE_CONV_2D"
        else:
            wt = self.rng.integers(-127, 128, (oc, k, k, self.c)).astype(np.int8)
            wi = q.tensor(self.b, wt.shape, np.int8, ws, 0, 0, wt)
            opts, code = q.conv_options((s, s), padding, act, (d, d)), "CONV_2D"
        bias = self.rng.integers(-2000, 2000, oc).astype(np.int32)
        bi = q.tensor(self.b, (oc,), np.int32, self.scale * ws, 0, 0, bias)
        # an output scale that keeps most results inside int8 (about 40 steps of spread)
        scale = float(self.scale * ws.mean() * 74 * 74 * np.sqrt(taps) / 40)
        oh, ow = self._out(k, s, d, padding)
        out = self._next(oh, ow, oc, scale)
        q.add_op(self.b, code, [self.cur, wi, bi], [out], opts)
        self.cur = out
        return self

    def pool(self, code: str, k: int, s: int, padding: str = "VALID") -> Chain:
        oh, ow = self._out(k, s, 1, padding)
        # max pool keeps its input's parameters (TFLite requires it); average pool too
        out = q.tensor(self.b, (1, oh, ow, self.c), np.int8, self.scale, self.zp)
        self.h, self.w = oh, ow
        q.add_op(self.b, code, [self.cur], [out], q.pool_options((k, k), (s, s), padding))
        self.cur = out
        return self

    def save(self, name: str) -> Chain:
        self.saved[name] = (self.cur, self.scale, self.zp)
        return self

    def add(self, name: str, act: str | None = None) -> Chain:
        """A residual ADD of the saved tensor ``name``, with its own output scale."""
        other = self.saved[name][0]
        out = self._next(self.h, self.w, self.c, max(self.scale, self.saved[name][1]) * 1.5)
        q.add_op(self.b, "ADD", [self.cur, other], [out], q.add_options(act))
        self.cur = out
        return self

    def build(self) -> bytes:
        self.b.outputs = [self.cur]
        return self.b.build()


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
