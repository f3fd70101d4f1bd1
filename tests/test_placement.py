"""Properties of the arena placement on random live ranges (hypothesis).

The placement looks only at the buffers live together (``overlaps``); it must give exactly the
offsets of the plain greedy rule (scan every placed buffer in offset order, the quadratic
implementation it replaced, kept here as the reference), pass the independent
``verify_allocation``, never use more than the naive plan, and never less than the lower bound.
"""

from __future__ import annotations

import bisect

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opfuse.memory import TensorLife, lower_bound, plan_tensors, verify_allocation
from opfuse.memory.placement import (
    ORDERINGS,
    Buffer,
    best_greedy,
    buffers_of,
    jitter_tries_for,
    orderings_for,
    overlaps,
    place_greedy,
    place_in_order,
)


def reference_place_in_order(buffers, order):
    """The greedy rule as first written: every placed buffer, in offset order."""
    placed: list[tuple[int, int]] = []
    offsets: dict[int, int] = {}
    arena = 0
    for i in order:
        buf = buffers[i]
        candidate = 0
        for offset, j in placed:
            other = buffers[j]
            if other.last < buf.first or buf.last < other.first:
                continue
            if offset >= candidate + buf.size:
                break
            candidate = max(candidate, offset + other.size)
        offsets[i] = candidate
        bisect.insort(placed, (candidate, i))
        arena = max(arena, candidate + buf.size)
    return offsets, arena


@st.composite
def lives(draw, max_tensors: int = 40) -> tuple[TensorLife, ...]:
    steps = draw(st.integers(1, 30))
    n = draw(st.integers(1, max_tensors))
    out = []
    for i in range(n):
        first = draw(st.integers(0, steps - 1))
        last = draw(st.integers(first, min(steps - 1, first + draw(st.integers(0, steps)))))
        size = draw(st.sampled_from([0, 1, 16, 17, 48, 64, 100, 256, 1000]))
        out.append(TensorLife(f"t{i}", size, first, last, "intermediate"))
    return tuple(out)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(lives())
def test_overlaps_are_exactly_the_pairs_live_together(tensors) -> None:
    buffers = buffers_of(tensors)
    adj = overlaps(buffers)
    for i, a in enumerate(buffers):
        want = {j for j, b in enumerate(buffers) if j != i and a.first <= b.last and b.first <= a.last}
        assert sorted(adj[i]) == sorted(want)


@SETTINGS
@given(lives(), st.sampled_from(sorted(ORDERINGS)))
def test_same_offsets_as_the_plain_greedy_scan(tensors, ordering) -> None:
    buffers = buffers_of(tensors)
    key = ORDERINGS[ordering]
    order = sorted(range(len(buffers)), key=lambda i: (*key(buffers[i]), i))  # ties: schedule order
    assert place_greedy(buffers, key) == reference_place_in_order(buffers, order)
    assert place_in_order(buffers, order[::-1]) == reference_place_in_order(buffers, order[::-1])


@SETTINGS
@given(lives(), st.sampled_from(["greedy", "naive"]))
def test_plans_verify_and_sit_between_bound_and_naive(tensors, planner) -> None:
    plan = plan_tensors(tensors, planner)
    verify_allocation(plan)
    naive = plan_tensors(tensors, "naive").peak_bytes
    assert lower_bound(buffers_of(tensors)) <= plan.peak_bytes <= naive
    assert plan.lower_bound_bytes == lower_bound(buffers_of(tensors))


@SETTINGS
@given(lives())
def test_best_greedy_matches_trying_every_order(tensors) -> None:
    """Stopping at the lower bound loses nothing: the full search of every order (and the same
    seeded jitters) with the reference scan gives the same arena."""
    buffers = buffers_of(tensors)
    _, _, arena = best_greedy(buffers)
    full = []
    for key in ORDERINGS.values():
        order = sorted(range(len(buffers)), key=lambda i: (*key(buffers[i]), i))  # ties: schedule order
        full.append(reference_place_in_order(buffers, order)[1])
    bound = lower_bound(buffers)
    assert arena <= min(full)
    assert arena >= bound
    if min(full) == bound:
        assert arena == bound


def test_caps_by_size() -> None:
    assert orderings_for(100) == ORDERINGS
    assert list(orderings_for(100_000)) == ["size", "first-use"]
    assert jitter_tries_for(700) == 64
    assert jitter_tries_for(200_000) == 1
    assert jitter_tries_for(10**7) == 0


def test_large_chain_places_at_the_bound() -> None:
    """50k buffers in a residual-like chain (each read by the next two steps): fast and tight."""
    buffers = [Buffer((f"t{i}",), 512, i, i + 2) for i in range(50_000)]
    name, offsets, arena = best_greedy(buffers)
    assert arena == lower_bound(buffers) == 3 * 512
    assert len(offsets) == len(buffers)
