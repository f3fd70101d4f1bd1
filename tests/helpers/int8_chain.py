"""An int8 NHWC chain of TFLite ops written with tests/helpers/tflite_builder.py, each layer
appending one op to the current tensor, its output scale chosen to keep most results inside int8
(tests/test_c_cascade_int8.py, tests/test_c_int8_row_tiles.py)."""

from __future__ import annotations

import numpy as np

from tests.helpers import qgraphs as q
from tests.helpers import tflite_builder as tb


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
