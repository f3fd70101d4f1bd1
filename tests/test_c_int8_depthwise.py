"""The int8 depthwise kernel (opfuse/backends/c/int8/depthwise_dsp.py) vs TFLite Micro, bit for
bit, on its edge cases: channel counts that fill no SIMD word, zero points at both ends of the
range and 0, per-channel scales, padding on every border, stride 2, 5x5 and 7x7 windows, rows too
narrow for a SIMD pair; and its schedule of words and lanes against the taps it must cover."""

from __future__ import annotations

import numpy as np
import pytest

from opfuse.kernelplan.conv8 import reach, row_schedule, tap_pairs

pytest.importorskip("tflite_micro")

from tests.helpers import qgraphs as q  # noqa: E402
from tests.helpers import tflite_builder as tb  # noqa: E402
from tests.helpers.c_int8 import compare_with_tflm, int8_inputs, nchw, nhwc, out_geometry  # noqa: E402
from tests.helpers.qgraphs import QGraph  # noqa: E402

# (H, W, C, K, stride, padding, act, input zero point, seed)
CASES = {
    "3x3_s1_c3_zp-128": (9, 11, 3, 3, 1, "SAME", "relu6", -128, 1),
    "3x3_s1_c5_zp127": (8, 10, 5, 3, 1, "SAME", None, 127, 2),
    "3x3_s2_c7_zp0": (11, 13, 7, 3, 2, "SAME", "relu", 0, 3),
    "3x3_s2_even_c6": (12, 12, 6, 3, 2, "SAME", None, -5, 4),
    "3x3_valid_c1": (7, 9, 1, 3, 1, "VALID", None, 17, 5),
    "5x5_s1_c9": (10, 12, 9, 5, 1, "SAME", "relu", -128, 6),
    "5x5_s2_c4": (13, 14, 4, 5, 2, "SAME", None, 3, 7),
    "7x7_s1_c2": (9, 16, 2, 7, 1, "SAME", "relu6", -128, 8),
    "7x7_s2_c3": (15, 15, 3, 7, 2, "SAME", None, 90, 9),
    "narrow_w2": (6, 2, 4, 3, 1, "SAME", None, -128, 10),
    "narrow_w3_s2": (7, 3, 3, 3, 2, "SAME", None, 127, 11),
    "kws_like_5wide": (25, 5, 8, 3, 1, "SAME", "relu", -128, 12),
}


def _depthwise(case: tuple) -> None:
    h, w_, c, k, s, padding, act, zx, seed = case
    rng = np.random.default_rng(seed)
    oh, pt, pb = out_geometry(h, k, s, 1, padding)
    ow, pl, pr = out_geometry(w_, k, s, 1, padding)
    sx, sy, zy = 0.04, 0.09, int(rng.integers(-10, 10))
    ws = rng.uniform(0.002, 0.02, c).astype(np.float32)  # per-channel scales
    bias = rng.integers(-3000, 3000, c).astype(np.int32)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w_, c), np.int8, sx, zx)
    wt = rng.integers(-127, 128, (1, k, k, c)).astype(np.int8)  # 1HWO
    wi = q.tensor(m, wt.shape, np.int8, ws, 0, 3, wt)
    bi = q.tensor(m, (c,), np.int32, sx * ws, 0, 0, bias)
    y = q.tensor(m, (1, oh, ow, c), np.int8, sy, zy)
    q.add_op(m, "DEPTHWISE_CONV_2D", [x, wi, bi], [y], q.dw_options((s, s), padding, 1, act, (1, 1)))
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, c, h, w_), sx, zx)
    wv = g.const(np.ascontiguousarray(wt[0].transpose(2, 0, 1)[:, None]), ws, 0, axis=0)
    bv = g.const(bias, sx * ws, 0, axis=0)
    out = g.op("Conv", [xi, wv, bv], (1, c, oh, ow), sy, zy, kernel_shape=[k, k], strides=[s, s],
               pads=[pt, pl, pb, pr], group=c)
    if act == "relu":
        out = g.op("Relu", [out], (1, c, oh, ow), sy, zy)
    elif act == "relu6":
        out = g.op("Clip", [out, g.const(np.float32(0.0)), g.const(np.float32(6.0))],
                   (1, c, oh, ow), sy, zy)
    compare_with_tflm(m.build(), g.model(out), int8_inputs((1, h, w_, c), seed), nchw, nhwc)


@pytest.mark.parametrize("case", sorted(CASES))
def test_depthwise_matches_tflite_micro(case: str) -> None:
    _depthwise(CASES[case])


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("stride", [1, 2])
def test_schedule_covers_every_tap_once(k: int, stride: int) -> None:
    """Each output pixel of a group gets every tap of its row once, from a word lane that holds
    the input byte the tap reads, within the bytes ``reach`` says the group reads."""
    pairs, singles = tap_pairs(k)
    weights = [pair for pair in pairs] + [(t,) for t in singles]
    span = reach(k, stride)
    for d in range(2):
        seen: list[int] = []
        for t in (t for t in row_schedule(k, stride) if t.out == d):
            assert t.word % 2 == 0 and t.word + 4 <= span
            lanes = {"pair": (0, 1), "lo": (0,), "hi": (1,)}[t.lane]
            for lane, tap in zip(lanes, weights[t.weight], strict=True):
                byte = t.word + int(t.odd) + 2 * lane  # e: bytes q, q+2; o: q+1, q+3
                assert byte == d * stride + tap
                seen.append(tap)
        assert sorted(seen) == list(range(k))


def test_zero_rows_are_shared_per_zero_point() -> None:
    """``zero_row``: a layer reuses an earlier row of its input zero point that is at least as
    wide as its input; a wider layer after a narrower one gets a row of its own width."""
    from types import SimpleNamespace

    from opfuse.backends.c.int8.depthwise_dsp import zero_row
    from opfuse.backends.c.tensors import Params, Store, WeightBlob
    from opfuse.kernelplan.conv8 import ConvGeom

    blob = WeightBlob()
    params = Params(Store(SimpleNamespace(tensors=[], offsets={}), blob))

    def geom(iw: int) -> ConvGeom:
        return ConvGeom(1, 4, 9, iw, 4, 9, iw, 4, (3, 3), (1, 1), (1, 1), (1, 1))

    def row(name: str) -> bytes:  # the bytes from the parameter's offset to the blob's end
        arg = params.args[int(name.removeprefix("arg"))]  # "(const int8_t *)(WB + offset)"
        return b"".join(blob.chunks)[int(arg.split("WB + ")[1].rstrip(")")):]

    for iw, zx in ((24, -128), (48, -128), (12, -128), (48, 7), (30, 7), (31, -128)):
        data = row(zero_row(params, geom(iw), zx))
        assert data[:iw] == np.full(iw, zx, np.int8).tobytes(), (iw, zx)
    keys = sorted(k for k in blob.offsets if k.startswith("dw:zrow"))
    assert keys == ["dw:zrow:-128:24:int8_t", "dw:zrow:-128:48:int8_t", "dw:zrow:7:48:int8_t"]
