"""Placing buffers in the arena: no reuse, TFLite Micro's greedy rule, and the lower bound.

A buffer is one or more tensors sharing bytes (an in-place chain); it is live from its first member's
first step to its last member's last step. Sizes are already aligned.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opfuse.memory.lifetimes import TensorLife


@dataclass(frozen=True)
class Buffer:
    members: tuple[str, ...]  # tensor names stored here, in schedule order
    size: int  # aligned bytes
    first: int
    last: int

    @property
    def span(self) -> int:
        return self.last - self.first + 1


def buffers_of(tensors: Sequence[TensorLife]) -> tuple[Buffer, ...]:
    """One buffer per tensor (no sharing)."""
    return tuple(Buffer((t.name,), t.aligned_bytes, t.first, t.last) for t in tensors)


# Orders in which greedy visits buffers. "size" is TFLite Micro's GreedyMemoryPlanner (largest
# first; ties by first use here); the others are tried too and the smallest arena wins.
ORDERINGS: dict[str, Callable[[Buffer], tuple]] = {
    "size": lambda b: (-b.size, b.first, b.last),
    "size-longest": lambda b: (-b.size, -b.span, b.first),
    "longest": lambda b: (-b.span, -b.size, b.first),
    "area": lambda b: (-b.size * b.span, -b.size, b.first),
    "first-use": lambda b: (b.first, -b.size, -b.span),
}


JITTER_TRIES = 64


def place_naive(buffers: Sequence[Buffer]) -> tuple[dict[int, int], int]:
    """Every buffer its own slot, in first-use order. Returns (buffer index -> offset, arena)."""
    offsets: dict[int, int] = {}
    end = 0
    for i in sorted(range(len(buffers)), key=lambda i: (buffers[i].first, buffers[i].members)):
        offsets[i] = end
        end += buffers[i].size
    return offsets, end


def place_greedy(
    buffers: Sequence[Buffer], key: Callable[[Buffer], tuple]
) -> tuple[dict[int, int], int]:
    """Visit buffers in ``key`` order; put each at the lowest offset where it overlaps no placed
    buffer that is live at the same time (offsets stay aligned: every size is)."""
    order = sorted(range(len(buffers)), key=lambda i: (*key(buffers[i]), buffers[i].members))
    return place_in_order(buffers, order)


def place_in_order(buffers: Sequence[Buffer], order: Sequence[int]) -> tuple[dict[int, int], int]:
    """The greedy rule with an explicit visiting order (buffer indices)."""
    placed: list[tuple[int, int]] = []  # (offset, buffer index), sorted by offset
    offsets: dict[int, int] = {}
    arena = 0
    for i in order:
        buf = buffers[i]
        candidate = 0
        for offset, j in placed:
            other = buffers[j]
            if other.last < buf.first or buf.last < other.first:
                continue  # never live together
            if offset >= candidate + buf.size:
                break  # the gap below this one is large enough; later ones sit higher still
            candidate = max(candidate, offset + other.size)
        offsets[i] = candidate
        bisect.insort(placed, (candidate, i))
        arena = max(arena, candidate + buf.size)
    return offsets, arena


def best_greedy(
    buffers: Sequence[Buffer], jitter_tries: int = JITTER_TRIES, seed: int = 0
) -> tuple[str, dict[int, int], int]:
    """Greedy under every ordering in ORDERINGS, keeping the smallest arena (first listed on ties).
    While that is above the lower bound, retry up to ``jitter_tries`` times with sizes scaled by a
    seeded random factor in [1, 3) (deterministic), stopping as soon as the bound is met."""
    best: tuple[str, dict[int, int], int] | None = None
    for name, key in ORDERINGS.items():
        offsets, arena = place_greedy(buffers, key)
        if best is None or arena < best[2]:
            best = (name, offsets, arena)
    assert best is not None
    bound = lower_bound(buffers)
    rng = random.Random(seed)
    for attempt in range(jitter_tries):
        if best[2] <= bound:
            break
        weight = [b.size * (1.0 + 2.0 * rng.random()) for b in buffers]
        order = sorted(range(len(buffers)), key=lambda i: (-weight[i], i))
        offsets, arena = place_in_order(buffers, order)
        if arena < best[2]:
            best = (f"size-jitter-{attempt}", offsets, arena)
    return best


def lower_bound(buffers: Sequence[Buffer]) -> int:
    """Largest sum of sizes of buffers live at one step: no placement of these buffers fits in
    less (they are all needed at that step and may not overlap)."""
    if not buffers:
        return 0
    n = max(b.last for b in buffers) + 2
    delta = [0] * n
    for b in buffers:
        delta[b.first] += b.size
        delta[b.last + 1] -= b.size
    best = live = 0
    for d in delta:
        live += d
        best = max(best, live)
    return best
