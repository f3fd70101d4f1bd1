"""One int8 op run in the generated C and in TFLite Micro on the same inputs, compared bit for bit
(tests/test_c_int8.py and its siblings)."""

from __future__ import annotations

import numpy as np

from tests.helpers import qgraphs as q
from tests.helpers.qgraphs import run_c

RUNS = 20


def _same_pads(size: int, k: int, s: int, d: int) -> tuple[int, int, int]:
    """(output size, pad before, pad after) of TFLite SAME padding."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return out, total // 2, total - total // 2


def out_geometry(size: int, k: int, s: int, d: int, padding: str) -> tuple[int, int, int]:
    if padding == "SAME":
        return _same_pads(size, k, s, d)
    return (size - (k - 1) * d - 1) // s + 1, 0, 0


def int8_inputs(shape, seed: int, dtype=np.int8) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    return [rng.integers(info.min, info.max + 1, shape).astype(dtype) for _ in range(RUNS)]


def compare_with_tflm(tfl: bytes, model, xs_nhwc: list[np.ndarray], to_ir, from_ir,
                      fuse: bool = True) -> None:
    ref = q.run_tflm(tfl, [[x] for x in xs_nhwc])
    name = model.graph.inputs[0].name
    got = run_c(model, [{name: to_ir(x)} for x in xs_nhwc], fuse=fuse)
    out = model.graph.outputs[0].name
    for r, g in zip(ref, got, strict=True):
        c = from_ir(g[out])
        diff = int(np.sum(r[0] != c))
        assert diff == 0, f"{diff} of {c.size} elements differ; max |d| = " \
            f"{int(np.max(np.abs(r[0].astype(int) - c.astype(int))))}"


def nchw(x):
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def nhwc(x):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
