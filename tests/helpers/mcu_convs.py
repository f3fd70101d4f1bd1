"""One-op int8 CONV_2D .tflite files for the Cortex-M matrix kernels' tests (tests/test_c_int8_mcu.py)
and the NHWC input read in place (tests/test_c_nhwc_input.py): random parameters from a seed,
checked bit for bit against TFLite Micro there."""

from __future__ import annotations

import numpy as np

from tests.helpers import qgraphs as q
from tests.helpers import tflite_builder as tb


def _size(n: int, k: int, s: int, padding: str) -> int:
    return -(-n // s) if padding == "SAME" else (n - k) // s + 1


def conv_tflite(h: int, w: int, c: int, oc: int, kh: int, kw: int, s: int, padding: str,
                act: str | None, zx: int, per_channel: bool, seed: int) -> bytes:
    """One CONV_2D (OHWI int8 weights, int32 bias), random parameters from ``seed``."""
    rng = np.random.default_rng(seed)
    oh, ow = _size(h, kh, s, padding), _size(w, kw, s, padding)
    ws = rng.uniform(0.002, 0.02, oc if per_channel else 1).astype(np.float32)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, c), np.int8, 0.04, zx)
    wt = rng.integers(-127, 128, (oc, kh, kw, c)).astype(np.int8)
    wi = q.tensor(m, wt.shape, np.int8, ws, 0, 0, wt)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    bi = q.tensor(m, (oc,), np.int32, 0.04 * np.broadcast_to(ws, (oc,)), 0, 0, bias)
    y = q.tensor(m, (1, oh, ow, oc), np.int8, 0.09, int(rng.integers(-10, 10)))
    q.add_op(m, "CONV_2D", [x, wi, bi], [y], q.conv_options((s, s), padding, act))
    m.inputs, m.outputs = [x], [y]
    return m.build()


# (H, W, C, OC, KH, KW, stride, padding, act, z_x, per-channel weights, seed): each reaches one
# im2col order (im2col.order) and tiles that leave remainders (6 pixels x 1 channel)
CONV_CASES = {
    "pointwise_odd_channels": (5, 7, 5, 3, 1, 1, 1, "VALID", "relu", 3, True, 1),
    "pointwise_zx_min": (4, 4, 8, 7, 1, 1, 1, "VALID", None, -128, True, 2),
    "pointwise_zx_max": (3, 5, 12, 4, 1, 1, 1, "VALID", "relu6", 127, False, 3),
    "pointwise_stride2": (7, 6, 4, 6, 1, 1, 2, "VALID", None, -5, True, 4),
    "taps_3x3_s2_same": (9, 8, 8, 5, 3, 3, 2, "SAME", "relu", 11, True, 5),
    "taps_3x3_s1_same_zx_max": (6, 5, 4, 9, 3, 3, 1, "SAME", None, 127, True, 6),
    # layer by layer, a stride-1 fill copies the window of the pixel to the left (im2col.reusable)
    # within a row: tiles straddling rows, a ragged last tile (35 pixels in sixes), rows
    # narrower than a tile, a wider kernel
    "taps_3x3_s1_ragged": (7, 5, 8, 6, 3, 3, 1, "SAME", "relu", -3, True, 11),
    "taps_3x3_s1_narrow_rows": (9, 2, 4, 3, 3, 3, 1, "SAME", None, 5, False, 12),
    "taps_5x5_s1_valid": (8, 9, 4, 5, 5, 5, 1, "VALID", "relu6", -128, True, 13),
    "channels_10x4_s2_same": (13, 10, 1, 6, 10, 4, 2, "SAME", "relu", -128, True, 7),
    "generic_3x3_c3_relu6": (8, 7, 3, 16, 3, 3, 1, "SAME", "relu6", 0, True, 8),
    "generic_5x5_c2_valid": (9, 8, 2, 3, 5, 5, 1, "VALID", None, -17, False, 9),
    "generic_2x3_c5_s2": (7, 9, 5, 2, 2, 3, 2, "SAME", None, 60, True, 10),
}
