"""``--method mse``: per tensor, the clipping range whose int8 quantization error is least.

A second pass over the calibration samples fills, per calibrated tensor, a histogram of BINS bins
over its min/max range (the first pass). Candidate ranges are [a * min, b * max] for a and b in
1/STEPS, 2/STEPS ... 1 (a is 0 for a tensor that never goes negative, b for one never positive),
every pair of them; each gets the int8 asymmetric parameters ``ranges.asymmetric`` would give it
(widened to hold 0, float32 scale, nudged zero point), and its error is the sum over bins of
count * (centre - dequantize(quantize(centre)))^2: the values clipped outside the range pay their
distance to the edge, the ones inside their rounding error. The pair with the least error wins
(the smallest range on a tie). onnxruntime's calibrators have no such search (MinMax, Entropy,
Percentile, Distribution), so it is written here.
"""

from __future__ import annotations

import numpy as np

BINS = 4096
STEPS = 100
QMIN, QMAX = -128, 127


class Histogram:
    """Counts of a tensor's calibration values over fixed bins spanning [lo, hi]."""

    def __init__(self, lo: float, hi: float, bins: int = BINS) -> None:
        self.lo, self.hi = lo, hi
        self.edges = np.linspace(lo, hi, bins + 1)
        self.counts = np.zeros(bins, np.int64)

    def add(self, values: np.ndarray) -> None:
        v = np.asarray(values, np.float64).ravel()
        self.counts += np.histogram(np.clip(v, self.lo, self.hi), bins=self.edges)[0]

    def centres(self) -> tuple[np.ndarray, np.ndarray]:
        """(bin centres, counts) of the non-empty bins."""
        keep = self.counts > 0
        mid = (self.edges[:-1] + self.edges[1:]) / 2
        return mid[keep], self.counts[keep].astype(np.float64)


def params(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ``ranges.asymmetric`` for ranges whose lo <= 0 <= hi and hi > lo:
    (float32 scales as float64, zero points)."""
    scale = (hi - lo) / float(QMAX - QMIN)
    zp = np.clip(np.rint(QMIN - lo / scale), QMIN, QMAX)
    return scale.astype(np.float32).astype(np.float64), zp


def errors(x: np.ndarray, n: np.ndarray, lo: float, his: np.ndarray) -> np.ndarray:
    """Sum of n * (x - qdq(x))^2 for the ranges [lo, h], h in ``his``: one error per h."""
    scale, zp = params(np.full_like(his, lo), his)
    s, z = scale[:, None], zp[:, None]
    q = np.clip(np.rint(x[None, :] / s) + z, QMIN, QMAX)
    return ((x[None, :] - (q - z) * s) ** 2 * n[None, :]).sum(axis=1)


def fractions(edge: float) -> np.ndarray:
    """The candidate ends a * edge, a in 1/STEPS..1 (just 0 for an edge of 0)."""
    if edge == 0.0:
        return np.zeros(1)
    return edge * np.arange(1, STEPS + 1) / STEPS


def best_range(hist: Histogram) -> tuple[float, float]:
    """The (lo, hi) of least quantization error over ``hist`` among the candidates above."""
    x, n = hist.centres()
    lo_edge, hi_edge = min(hist.lo, 0.0), max(hist.hi, 0.0)
    his = fractions(hi_edge)
    best = (np.inf, lo_edge, hi_edge)
    for lo in fractions(lo_edge):  # smallest first, so a tie keeps the smaller range
        if not (his > lo).any():
            continue
        err = errors(x, n, lo, his)
        i = int(np.argmin(err))
        if err[i] < best[0] * (1 - 1e-12):
            best = (float(err[i]), float(lo), float(his[i]))
    return best[1], best[2]
