"""One int8 op run in the generated C and in TFLite Micro on the same inputs, compared bit for bit
(tests/test_c_int8.py and its siblings)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tests.helpers import qgraphs as q
from tests.helpers import tflite_builder as tb
from tests.helpers.qgraphs import QGraph, run_c

RUNS = 20
SX, SY = 0.04, 0.09  # conv_pair's input and output scales


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


@dataclass
class ConvPair:
    """One int8 Conv (or DepthwiseConv) as a TFLite file ``m`` (x -> y, NHWC) and as the same
    QDQ-annotated IR ``g`` (xi -> out, NCHW), its activation fused in both: what the C must
    compute bit for bit as TFLite Micro does."""

    m: object
    x: int
    y: int
    g: object
    xi: object
    out: object
    oc: int
    oh: int
    ow: int


def conv_pair(h: int, w_: int, c: int, oc: int, k: int, s: int, padding: str, d: int,
              act: str | None, mult: int | None, seed: int, ws: np.ndarray | None = None,
              bias: np.ndarray | None = None, wmax: np.ndarray | int = 127,
              weights: np.ndarray | None = None, zx: int | None = None,
              zy: int | None = None) -> ConvPair:
    """``mult`` None: a dense conv (OHWI weights); else a depthwise conv of that multiplier.
    ``ws``, ``bias``: the per-channel weight scales and int32 biases (default: drawn small),
    ``wmax``: the weights' largest magnitude (per output channel, or one for all); ``weights``:
    a dense conv's OHWI weights instead of drawn ones; ``zx``, ``zy``: the input's and output's
    zero points instead of drawn ones (the draws after them unchanged)."""
    rng = np.random.default_rng(seed)
    oh, pt, pb = out_geometry(h, k, s, d, padding)
    ow, pl, pr = out_geometry(w_, k, s, d, padding)
    drawn_zx = int(rng.integers(-20, 20))
    drawn_zy = int(rng.integers(-10, 10))
    sx, zx, sy, zy = SX, drawn_zx if zx is None else zx, SY, drawn_zy if zy is None else zy
    drawn = rng.uniform(0.002, 0.02, oc).astype(np.float32)
    ws = drawn if ws is None else np.asarray(ws, np.float32)
    drawn = rng.integers(-3000, 3000, oc).astype(np.int32)
    bias = drawn if bias is None else np.asarray(bias, np.int32)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w_, c), np.int8, sx, zx)
    if mult is None:
        wt = _weights(rng, (oc, k, k, c), wmax, 0) if weights is None else weights  # OHWI
        wi = q.tensor(m, wt.shape, np.int8, ws, 0, 0, wt)
        opts, code = q.conv_options((s, s), padding, act, (d, d)), "CONV_2D"
        w_ir, group = wt.transpose(0, 3, 1, 2), 1
    else:
        wt = _weights(rng, (1, k, k, oc), wmax, 3)  # 1HWO
        wi = q.tensor(m, wt.shape, np.int8, ws, 0, 3, wt)
        opts, code = q.dw_options((s, s), padding, mult, act, (d, d)), "DEPTHWISE_CONV_2D"
        w_ir, group = wt[0].transpose(2, 0, 1)[:, None], c
    bi = q.tensor(m, (oc,), np.int32, sx * ws, 0, 0, bias)
    y = q.tensor(m, (1, oh, ow, oc), np.int8, sy, zy)
    q.add_op(m, code, [x, wi, bi], [y], opts)
    g = QGraph()
    xi = g.input((1, c, h, w_), sx, zx)
    wv = g.const(np.ascontiguousarray(w_ir), ws, 0, axis=0)
    bv = g.const(bias, sx * ws, 0, axis=0)
    out = g.op("Conv", [xi, wv, bv], (1, oc, oh, ow), sy, zy, kernel_shape=[k, k],
               strides=[s, s], dilations=[d, d], pads=[pt, pl, pb, pr], group=group)
    if act == "relu":
        out = g.op("Relu", [out], (1, oc, oh, ow), sy, zy)
    elif act == "relu6":
        out = g.op("Clip", [out, g.const(np.float32(0.0)), g.const(np.float32(6.0))],
                   (1, oc, oh, ow), sy, zy)
    return ConvPair(m, x, y, g, xi, out, oc, oh, ow)


def _weights(rng: np.random.Generator, shape: tuple[int, ...], wmax: np.ndarray | int,
             axis: int) -> np.ndarray:
    """Uniform int8 weights in [-127, 127], each output channel (``axis``) scaled to its
    ``wmax``: the same draws whatever the bound."""
    wt = rng.integers(-127, 128, shape)
    if np.ndim(wmax) == 0 and int(wmax) == 127:
        return wt.astype(np.int8)
    bound = np.broadcast_to(np.asarray(wmax), (shape[axis],)).reshape(
        [-1 if i == axis else 1 for i in range(len(shape))])
    return np.round(wt * bound / 127).astype(np.int8)


def shared_tflite_c_matches_tflm(name: str, builds: list[tuple[str, list[str]]], seeds: int,
                                 needle: str) -> str:
    """The shared ``../shared/models/tflite/<name>``'s generated C (layer by layer as emit_c
    writes it by default), built with each of ``builds`` ((label, gcc flags)), equals TFLite
    Micro on ``seeds`` seeded inputs, and its model.c contains ``needle`` (the path under test).
    Skips the calling test without the corpus; returns model.c."""
    import tempfile
    from pathlib import Path

    import pytest

    from opfuse.api import compile
    from opfuse.backends.c import emit_c
    from opfuse.measure.run.host import CModel, build_shared
    from opfuse.measure.validate.tflite_reference import TfliteReference
    from tests.helpers.shared import SHARED_MODELS

    path = SHARED_MODELS / "tflite" / name
    if not path.is_file():
        pytest.skip(f"../shared/models/tflite/{name} not present")
    ref = TfliteReference(path)
    feeds = [ref.random_inputs(seed) for seed in range(seeds)]
    with tempfile.TemporaryDirectory(prefix="opfuse-shared-c-") as tmp:
        folder = Path(tmp) / "m"
        emit_c(compile(path), folder)
        c = (folder / "model.c").read_text()
        assert needle in c, needle
        for label, flags in builds:
            model = CModel(build_shared(folder, flags, name=f"lib_{label}.so"))
            for f in feeds:
                got = model.run(f)
                for key, want in ref.run(f).items():
                    assert np.array_equal(np.array(got[key]).reshape(want.shape), want), label
    return c
