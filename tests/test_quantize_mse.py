"""``--method mse`` (opfuse/quantize/mse.py): the clipping range it picks is the one of least int8
quantization error, checked against a brute-force search that quantizes the raw values through
``ranges.asymmetric`` and numpy for every candidate range, one at a time."""

from __future__ import annotations

import numpy as np
import pytest

from opfuse.quantize import mse
from opfuse.quantize.ranges import Range, asymmetric


def _qdq_error(values: np.ndarray, lo: float, hi: float) -> float:
    """Squared error of ONNX QuantizeLinear/DequantizeLinear (int8) with the parameters
    ``asymmetric`` gives the range, on the raw values."""
    scale, zp = asymmetric(Range(lo, hi, False))
    q = np.clip(np.rint(values / np.float32(scale)) + zp, -128, 127)
    return float(np.sum((values - (q - zp) * np.float64(np.float32(scale))) ** 2))


def _brute_force(values: np.ndarray) -> tuple[float, float, float]:
    """(least error, lo, hi) over every candidate pair, one by one."""
    lo_edge, hi_edge = min(values.min(), 0.0), max(values.max(), 0.0)
    best = (np.inf, 0.0, 0.0)
    for lo in mse.fractions(float(lo_edge)):
        for hi in mse.fractions(float(hi_edge)):
            if hi > lo:
                err = _qdq_error(values, float(lo), float(hi))
                if err < best[0]:
                    best = (err, float(lo), float(hi))
    return best


def _pick(samples: list[np.ndarray]) -> tuple[float, float]:
    lo = min(float(s.min()) for s in samples)
    hi = max(float(s.max()) for s in samples)
    hist = mse.Histogram(lo, hi)
    for s in samples:
        hist.add(s)
    return mse.best_range(hist)


@pytest.mark.parametrize("kind", ["laplace_with_outliers", "relu_heavy_tail", "skewed"])
def test_mse_range_is_the_brute_force_least_error(kind: str) -> None:
    rng = np.random.default_rng(7)
    if kind == "laplace_with_outliers":
        samples = [rng.laplace(0.0, 0.5, 4000) for _ in range(4)]
        samples[2][:3] = [9.0, -7.5, 8.2]  # rare large values that minmax spends its range on
    elif kind == "relu_heavy_tail":
        samples = [np.maximum(rng.standard_t(3, 4000), 0.0) for _ in range(4)]
    else:
        samples = [rng.gamma(2.0, 1.0, 4000) - 1.0 for _ in range(4)]
    values = np.concatenate(samples)
    lo, hi = _pick(samples)
    least, blo, bhi = _brute_force(values)
    picked = _qdq_error(values, lo, hi)
    # the histogram's bin centres stand for the raw values: within 1 % of the brute-force least
    assert picked <= least * 1.01, (kind, (lo, hi), (blo, bhi))
    assert lo >= min(values.min(), 0.0) and hi <= max(values.max(), 0.0)
    if kind == "relu_heavy_tail":
        assert lo == 0.0
    # min/max is a candidate: never worse than it, and narrower on these long-tailed data
    assert picked <= _qdq_error(values, float(values.min()), float(values.max()))
    assert hi < values.max()


def test_vectorised_params_are_asymmetrics() -> None:
    """mse.params is ranges.asymmetric on arrays (the search scores what will be written)."""
    rng = np.random.default_rng(1)
    los = -rng.uniform(0, 5, 200)
    his = rng.uniform(0.01, 5, 200)
    los[:20] = 0.0
    scale, zp = mse.params(los, his)
    for i in range(200):
        s, z = asymmetric(Range(float(los[i]), float(his[i]), False))
        assert (scale[i], zp[i]) == (s, z)


def test_quantize_with_method_mse_narrows_ranges_and_loads(tmp_path) -> None:
    """Through the stage: every mse range lies within the min/max one, at least one is
    narrower, and the QDQ model is at least as accurate as minmax's on the calibration data."""
    import onnx

    from opfuse import api
    from opfuse.quantize.data import Samples
    from tests.helpers.quant import ops_model

    path = tmp_path / "ops.onnx"
    onnx.save(ops_model(), path)
    rng = np.random.default_rng(0)
    cal = Samples("t", {"x": rng.standard_normal((12, 1, 4, 8, 8)).astype(np.float32)}, 12)
    result = api.compile(str(path), "x86-host")
    by = {m: api.quantize(result, cal, evaluation=cal, method=m) for m in ("minmax", "mse")}
    narrower = 0
    for t, r in by["mse"].ranges.items():
        mm = by["minmax"].ranges[t]
        assert min(mm.lo, 0.0) <= r.lo <= 0.0 <= r.hi <= max(mm.hi, 0.0) or r.constant, t
        narrower += (r.lo, r.hi) != (mm.lo, mm.hi)
    assert narrower >= 1
    assert by["mse"].to_json()["method"] == "mse"
