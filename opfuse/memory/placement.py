"""Placing buffers in the arena: no reuse, TFLite Micro's greedy rule, and the lower bound.

A buffer is one or more tensors sharing bytes (an in-place chain); it is live from its first member's
first step to its last member's last step. Sizes are already aligned.

Cost: the pairs of buffers live together are found once (``overlaps``, a sweep over steps), and a
greedy placement then looks only at a buffer's overlapping neighbours: O(n log n + K log k) for n
buffers with K overlapping pairs and at most k neighbours each, instead of O(n^2) per order.
"""

from __future__ import annotations

import heapq
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
# Past this many buffers only LARGE_GRAPH_ORDERINGS are tried. On the built-in and shared models
# (at most ~700 buffers) TFLite Micro's "size" order or a jittered one always won; the other orders
# cost one placement each and are kept where a placement is cheap.
MANY_BUFFERS = 20_000
LARGE_GRAPH_ORDERINGS = ("size", "first-use")
# Jittered retries stop at this many buffer placements in total (64 retries up to 3,125 buffers,
# one at 200,000): they pay on small, irregular graphs (light_densenet121 needed 14).
JITTER_BUDGET = 200_000


def place_naive(buffers: Sequence[Buffer]) -> tuple[dict[int, int], int]:
    """Every buffer its own slot, in first-use order. Returns (buffer index -> offset, arena)."""
    offsets: dict[int, int] = {}
    end = 0
    for i in sorted(range(len(buffers)), key=lambda i: (buffers[i].first, i)):
        offsets[i] = end
        end += buffers[i].size
    return offsets, end


def overlaps(buffers: Sequence[Buffer]) -> list[list[int]]:
    """For each buffer, the indices of the buffers live at some common step (computed once, used by
    every visiting order). A sweep over first steps with a heap of the live buffers' last steps:
    O(n log n + K) for K overlapping pairs, which is n times the typical number of live buffers
    (a handful in an inference schedule), instead of the n^2 / 2 pairs a scan of all would test."""
    adj: list[list[int]] = [[] for _ in buffers]
    live: list[tuple[int, int]] = []  # heap of (last step, index)
    for i in sorted(range(len(buffers)), key=lambda i: (buffers[i].first, buffers[i].last)):
        first = buffers[i].first
        while live and live[0][0] < first:
            heapq.heappop(live)
        mine = adj[i]
        for _, j in live:  # every one still in the heap is live at ``first``
            mine.append(j)
            adj[j].append(i)
        heapq.heappush(live, (buffers[i].last, i))
    return adj


def place_greedy(
    buffers: Sequence[Buffer],
    key: Callable[[Buffer], tuple],
    adj: list[list[int]] | None = None,
) -> tuple[dict[int, int], int]:
    """Visit buffers in ``key`` order; put each at the lowest offset where it overlaps no placed
    buffer that is live at the same time (offsets stay aligned: every size is)."""
    order = sorted(range(len(buffers)), key=lambda i: (*key(buffers[i]), i))  # ties: schedule order
    return place_in_order(buffers, order, adj)


def place_in_order(
    buffers: Sequence[Buffer], order: Sequence[int], adj: list[list[int]] | None = None
) -> tuple[dict[int, int], int]:
    """The greedy rule with an explicit visiting order (buffer indices).

    Only the placed buffers that share a step with the one being placed can block it, and
    ``overlaps`` lists those; sorted by offset, the first gap that is large enough (or the end of
    the last one) is the lowest offset that fits. Same offsets as scanning every placed buffer in
    offset order, in O(k log k) per buffer for k overlapping ones instead of O(n)."""
    if adj is None:
        adj = overlaps(buffers)
    sizes = [b.size for b in buffers]
    placed = [-1] * len(buffers)  # offset, -1 while not placed
    offsets: dict[int, int] = {}
    arena = 0
    for i in order:
        size = sizes[i]
        taken = sorted((placed[j], sizes[j]) for j in adj[i] if placed[j] >= 0)
        candidate = 0
        for offset, other in taken:
            if offset >= candidate + size:
                break  # the gap below this one is large enough; later ones sit higher still
            if offset + other > candidate:
                candidate = offset + other
        placed[i] = candidate
        offsets[i] = candidate
        if candidate + size > arena:
            arena = candidate + size
    return offsets, arena


def orderings_for(count: int) -> dict[str, Callable[[Buffer], tuple]]:
    """The visiting orders worth trying for ``count`` buffers (see ``MANY_BUFFERS``)."""
    if count <= MANY_BUFFERS:
        return ORDERINGS
    return {name: ORDERINGS[name] for name in LARGE_GRAPH_ORDERINGS}


def jitter_tries_for(count: int, limit: int = JITTER_TRIES) -> int:
    """Seeded retries allowed for ``count`` buffers: all ``limit`` up to JITTER_BUDGET placements in
    total, fewer beyond (one placement costs time linear in the buffers)."""
    return min(limit, JITTER_BUDGET // max(count, 1))


def best_greedy(
    buffers: Sequence[Buffer], jitter_tries: int = JITTER_TRIES, seed: int = 0
) -> tuple[str, dict[int, int], int]:
    """Greedy under the orderings of ``orderings_for``, keeping the smallest arena (first listed on
    ties), and stopping as soon as one meets the lower bound (no later one could be smaller). While
    above it, retry up to ``jitter_tries_for`` times with sizes scaled by a seeded random factor in
    [1, 3) (deterministic), stopping as soon as the bound is met."""
    adj = overlaps(buffers)
    bound = lower_bound(buffers)
    best: tuple[str, dict[int, int], int] | None = None
    for name, key in orderings_for(len(buffers)).items():
        offsets, arena = place_greedy(buffers, key, adj)
        if best is None or arena < best[2]:
            best = (name, offsets, arena)
        if best[2] <= bound:
            break
    assert best is not None
    rng = random.Random(seed)
    for attempt in range(jitter_tries_for(len(buffers), jitter_tries)):
        if best[2] <= bound:
            break
        weight = [b.size * (1.0 + 2.0 * rng.random()) for b in buffers]
        order = sorted(range(len(buffers)), key=lambda i: (-weight[i], i))
        offsets, arena = place_in_order(buffers, order, adj)
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
