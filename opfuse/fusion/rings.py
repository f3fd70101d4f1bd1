"""Ring-buffer sizing for a cascade: how many rows of each intermediate a row-streamed chain keeps.

A cascade is a chain of stages ``0 .. n-1``; stage ``i`` reads ``X[i]`` (``H[i]`` rows) and writes
``X[i+1]``. ``X[0]`` (the chain input) and ``X[n]`` (its output) are whole tensors in the arena;
every ``X[i]`` with ``0 < i < n`` is a ring buffer. Only the height axis streams; width and
channels are whole in every row.

Window of a stage (its rows only). Output row ``r`` of a stage with kernel height ``k``, stride
``s``, dilation ``d`` and top padding ``p`` reads input rows ``r*s - p + t*d`` for ``t < k``, so it
spans ``e = d*(k-1) + 1`` rows (the *extent*) starting at ``r*s - p``. Elementwise ops are
``k = s = d = 1, p = 0``. Two windows in one stage compose: ``(k1,s1,d1,p1)`` then
``(k2,s2,d2,p2)`` is a window of extent ``e2*s1 - s1 + e1`` (``= (e2-1)*s1 + e1``), stride
``s1*s2``, top padding ``p2*s1 + p1`` (dilation folded into the extent).

The schedule is demand-driven, with no recompute. The last stage writes bands of ``B`` output rows.
When a stage must produce output rows ``[a, b]`` it needs input rows up to
``hi = b*s - p + e - 1`` (clipped to the input's height); the producer first computes every missing
row up to ``hi``, in one band, then the stage computes its rows, then input rows below the next
band's first row ``(b+1)*s - p`` are freed. Walking back from the end, with ``F[i]`` and ``B[i]``
the first and steady band of stage ``i``'s output (``F[n-1] = B[n-1] = B``):

- steady pull on ``X[i]``: ``B[i-1] = B[i] * s[i]`` rows per band;
- first pull:             ``F[i-1] = min(H[i], (F[i]-1)*s[i] - p[i] + e[i])`` (the top padding
  rows do not exist, so the first band may pull more or fewer rows than a steady one);
- window:                 ``W[i] = (B[i]-1)*s[i] + e[i]`` rows read by one steady band.

At the moment stage ``i`` computes a steady band its input holds exactly its window (the rows kept
from the previous band plus the ones just pulled); when ``s > e`` some pulled rows are read by no
one but are still written, so a band of ``B[i-1]`` rows must fit too; the first band holds
``F[i-1]`` rows. A ring indexed by ``row mod R`` therefore needs

    R[i] = min(H[i], max(W[i], B[i-1], F[i-1]))

rows, and it never holds more. A ring of ``H[i]`` rows is the whole tensor: no gain. Every row of
every stage is computed exactly once, so row streaming adds no MACs. See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """The rows of its input one output row of a stage reads (height axis only)."""

    kernel: int = 1
    stride: int = 1
    dilation: int = 1
    pad_top: int = 0

    @property
    def extent(self) -> int:
        return self.dilation * (self.kernel - 1) + 1

    def then(self, after: Window) -> Window:
        """This window followed by ``after`` (one stage holding two windowed ops)."""
        extent = (after.extent - 1) * self.stride + self.extent
        return Window(
            kernel=extent,
            stride=self.stride * after.stride,
            dilation=1,
            pad_top=after.pad_top * self.stride + self.pad_top,
        )


@dataclass(frozen=True)
class Bands:
    """Per intermediate ``X[i]`` (0 < i < n): rows its producer writes in its first band and at most
    in a later one, and the rows its ring buffer holds."""

    first: tuple[int, ...]
    steady: tuple[int, ...]
    ring: tuple[int, ...]


def ring_rows(windows: Sequence[Window], heights: Sequence[int], band_rows: int) -> Bands:
    """Ring sizes of ``X[1] .. X[n-1]`` for the stages ``windows`` (``n`` of them), ``heights`` the
    rows of ``X[0] .. X[n]``, the last stage writing ``band_rows`` rows per band.

    Walks the real bands back from the end (the last band is cut by the tensor's height, and the
    top padding shortens the first), so short chains get the exact span; long ones the closed form.
    """
    n = len(windows)
    if len(heights) != n + 1 or n == 0 or band_rows < 1:
        raise ValueError("ring_rows needs n stages, n + 1 heights and band_rows >= 1")
    ends = list(range(band_rows - 1, heights[n] - 1, band_rows)) + [heights[n] - 1]
    first, steady, ring = [0] * n, [0] * n, [0] * n
    for i in range(n - 1, 0, -1):
        w, height, out_height = windows[i], heights[i], heights[i + 1]
        pulled: list[int] = []  # last row of X[i] pulled by each band that pulls any
        top = -1  # last row of X[i] computed so far
        span = 0
        start = 0
        for end in ends:
            hi = min(height - 1, end * w.stride - w.pad_top + w.extent - 1)
            low = _lowest_read(w, start, height, out_height)
            if hi > top:
                pulled.append(hi)
                low = min(low, top + 1)  # rows just written are alive, read or not
                top = hi
            span = max(span, top - low + 1)
            start = end + 1
        sizes = [b - a for a, b in zip([-1, *pulled], pulled, strict=False)]
        first[i], steady[i], ring[i] = sizes[0], max(sizes[1:], default=0), span
        ends = pulled
    return Bands(tuple(first[1:]), tuple(steady[1:]), tuple(ring[1:]))


def _lowest_read(w: Window, start: int, height: int, out_height: int) -> int:
    """The lowest input row read by any output row from ``start`` on (rows above it are free)."""
    best = height
    for r in range(start, out_height):
        for t in range(w.kernel):
            row = r * w.stride - w.pad_top + t * w.dilation
            if 0 <= row < height:
                best = min(best, row)
        if r * w.stride - w.pad_top >= 0:
            break  # later output rows start lower than nothing below this
    return best


def band_schedule(
    windows: Sequence[Window], heights: Sequence[int], band_rows: int
) -> list[tuple[int, int, int]]:
    """The demand-driven order the module docstring describes, as ``(stage, first, last)`` output
    row ranges in execution order: the last stage's bands of ``band_rows`` rows, each preceded by
    the rows its producers must compute first. Every row of every stage appears exactly once."""
    n = len(windows)
    done = [heights[0]] + [0] * n  # rows of X[i] computed so far (X[0] is whole)
    steps: list[tuple[int, int, int]] = []

    def pull(i: int, upto: int) -> None:
        if upto < done[i + 1]:
            return
        w = windows[i]
        hi = min(heights[i] - 1, upto * w.stride - w.pad_top + w.extent - 1)
        if i > 0 and hi >= done[i]:
            pull(i - 1, hi)
        steps.append((i, done[i + 1], upto))
        done[i + 1] = upto + 1

    for start in range(0, heights[n], band_rows):
        pull(n - 1, min(start + band_rows, heights[n]) - 1)
    return steps
