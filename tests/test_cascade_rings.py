"""Ring-buffer sizing (opfuse/fusion/rings.py) against a brute-force row-liveness simulation.

The simulation knows nothing of the algebra: it runs the band schedule row by row (a stage computes
the rows its consumer asks for, reading input rows ``r*s - p + t*d``), frees a row as soon as no
later output row reads it, and records, per intermediate, the span of rows alive at once (what a
ring indexed by ``row mod R`` must hold) and how many rows are alive.
"""

from __future__ import annotations

import itertools
import random

import pytest

from opfuse.fusion.rings import Window, ring_rows


def out_rows(height: int, w: Window, pad_bottom: int) -> int:
    return (height + w.pad_top + pad_bottom - w.extent) // w.stride + 1


def reads(w: Window, r: int, height: int) -> list[int]:
    rows = (r * w.stride - w.pad_top + t * w.dilation for t in range(w.kernel))
    return [x for x in rows if 0 <= x < height]


def simulate(windows: list[Window], heights: list[int], band: int) -> tuple[list[int], list[int]]:
    """heights[i] = rows of X[i] (i = 0..n). Returns (max span, max count) for X[1..n-1]."""
    n = len(windows)
    computed = [heights[0]] + [0] * n
    alive: list[set[int]] = [set() for _ in range(n + 1)]
    span = [0] * (n + 1)
    count = [0] * (n + 1)

    def needed_later(i: int, x: int, after: int) -> bool:
        return any(x in reads(windows[i], r, heights[i]) for r in range(after + 1, heights[i + 1]))

    def produce(i: int, upto: int) -> None:
        rows = range(computed[i + 1], upto + 1)
        if not rows:
            return
        wanted = [x for r in rows for x in reads(windows[i], r, heights[i])]
        if i > 0 and wanted and max(wanted) >= computed[i]:
            produce(i - 1, max(wanted))
        assert all(x in alive[i] for x in wanted) or i == 0, "a row was read after being freed"
        computed[i + 1] = upto + 1
        if i + 1 < n:
            alive[i + 1] |= set(rows)
            span[i + 1] = max(span[i + 1], max(alive[i + 1]) - min(alive[i + 1]) + 1)
            count[i + 1] = max(count[i + 1], len(alive[i + 1]))
        if i > 0:
            alive[i] = {x for x in alive[i] if needed_later(i, x, upto)}

    for start in range(0, heights[n], band):
        produce(n - 1, min(start + band - 1, heights[n] - 1))
    assert computed[n] == heights[n]
    return span[1:n], count[1:n]


def chain(
    specs: list[tuple[int, int, int, int, int]], height: int
) -> tuple[list[Window], list[int]]:
    windows, heights = [], [height]
    for k, s, d, p, pb in specs:
        w = Window(k, s, d, p)
        windows.append(w)
        heights.append(out_rows(heights[-1], w, pb))
    return windows, heights


MOBILENET_BLOCK = [(1, 1, 1, 0, 0), (3, 1, 1, 1, 1), (1, 1, 1, 0, 0), (1, 1, 1, 0, 0)]
STEM = [(3, 2, 1, 1, 1), (3, 1, 1, 1, 1), (1, 1, 1, 0, 0), (1, 1, 1, 0, 0), (3, 2, 1, 1, 1),
        (1, 1, 1, 0, 0)]  # fmt: skip
CASES = {
    "inverted_residual": (MOBILENET_BLOCK, 56),
    "stem_and_first_blocks": (STEM, 224),
    "valid_3x3_pair": ([(3, 1, 1, 0, 0), (3, 1, 1, 0, 0)], 20),
    "dilated": ([(1, 1, 1, 0, 0), (3, 1, 2, 2, 2), (3, 1, 3, 3, 3), (1, 1, 1, 0, 0)], 31),
    "strided_1x1": ([(3, 1, 1, 1, 1), (1, 2, 1, 0, 0), (3, 1, 1, 1, 1)], 17),
    "conv_then_pool": ([(3, 1, 1, 1, 1), (2, 2, 1, 0, 0), (3, 1, 1, 1, 1)], 33),
    "odd_5x5_s2": ([(5, 2, 1, 2, 2), (5, 2, 1, 2, 1), (1, 1, 1, 0, 0)], 27),
}


@pytest.mark.parametrize("band", [1, 2, 3, 4])
@pytest.mark.parametrize("name", list(CASES))
def test_ring_rows_equal_the_simulated_span(name: str, band: int) -> None:
    specs, height = CASES[name]
    windows, heights = chain(specs, height)
    span, count = simulate(windows, heights, band)
    rings = ring_rows(windows, heights, band).ring
    assert list(rings) == span, (name, band)
    assert all(c <= r for c, r in zip(count, rings, strict=True))


def test_inverted_residual_rings_are_a_few_rows() -> None:
    windows, heights = chain(MOBILENET_BLOCK, 56)
    bands = ring_rows(windows, heights, 1)
    # the 3x3 depthwise reads 3 expanded rows; the project and the add read one row each
    assert bands.ring == (3, 1, 1)


def test_random_chains_never_undersize_and_are_exact_undilated() -> None:
    rng = random.Random(7)
    for _ in range(150):
        specs = []
        for _ in range(rng.randint(2, 4)):
            k = rng.choice([1, 2, 3, 5])
            s = rng.choice([1, 1, 2])
            d = rng.choice([1, 1, 2])
            p = rng.randint(0, d * (k - 1))
            specs.append((k, s, d, p, rng.randint(0, d * (k - 1))))
        height = rng.randint(12, 40)
        windows, heights = chain(specs, height)
        if min(heights) < 1:
            continue
        band = rng.randint(1, 3)
        span, _ = simulate(windows, heights, band)
        rings = ring_rows(windows, heights, band).ring
        assert all(r >= s for r, s in zip(rings, span, strict=True)), (specs, height, band)
        if all(d == 1 for _, _, d, _, _ in specs):  # rows no window reads (dilation) may be dropped
            assert list(rings) == span, (specs, height, band)


def test_composed_window_reads_the_same_rows() -> None:
    for (k1, s1, d1, p1), (k2, s2, d2, p2) in itertools.product(
        [(3, 1, 1, 1), (3, 2, 1, 1), (2, 2, 1, 0), (3, 1, 2, 2)], repeat=2
    ):
        a, b = Window(k1, s1, d1, p1), Window(k2, s2, d2, p2)
        both = a.then(b)
        for r in range(6):
            lo = min(x for m in reads(b, r, 10**6) if m >= 0 for x in [m * s1 - p1])
            rows = {x for m in range(r * s2 - p2, r * s2 - p2 + b.extent)
                    for x in range(m * s1 - p1, m * s1 - p1 + a.extent)}  # fmt: skip
            assert min(rows) == r * both.stride - both.pad_top and len(rows) == both.extent
            assert lo >= min(rows)
