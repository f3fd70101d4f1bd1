"""opfuse.measure.sessions.block_timings and opfuse.measure.rounds, one timing loop (rounds.timed_runs):
identical runners come out within noise of 1.0x, a slower one does not, the first run of each block
and the first round are dropped; on a simulated clock, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from opfuse.measure.sessions import block_timings


def _work(n: int):
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    return lambda: float((a @ a).sum())


def test_identical_runners_are_within_noise_of_one() -> None:
    # the machine is shared: the bound is generous, and a second try absorbs one bad burst
    for _ in range(2):
        t = block_timings({"a": _work(96), "b": _work(96)}, blocks=7, runs_per_block=15)
        ratio = t["a"].median_s / t["b"].median_s
        if 0.7 <= ratio <= 1.4:
            break
    assert 0.7 <= ratio <= 1.4, ratio
    assert t["a"].low_s <= t["a"].median_s <= t["a"].high_s and t["a"].spread >= 0


def test_a_slower_runner_is_slower() -> None:
    t = block_timings({"small": _work(48), "big": _work(192)}, blocks=3, runs_per_block=5)
    assert t["big"].median_s > 2 * t["small"].median_s


def test_first_run_of_each_block_is_dropped_and_before_is_untimed() -> None:
    calls = {"runs": 0, "before": 0}

    def run() -> None:
        calls["runs"] += 1

    def before() -> None:
        calls["before"] += 1

    t = block_timings({"x": run}, blocks=4, runs_per_block=3, before={"x": before})
    assert calls["runs"] == calls["before"] == 4 * (3 + 1)
    assert t["x"].blocks == 4 and t["x"].runs_per_block == 3
    with pytest.raises(ValueError):
        block_timings({"x": run}, blocks=0)


def test_a_run_of_several_calls_is_timed_per_call() -> None:
    """calls=k: each timed run makes k back-to-back calls after one ``before``, and the figures
    are per call (a call that sleeps 1 ms reads ~1 ms, not k ms)."""
    import time

    made = {"runs": 0, "before": 0}

    def run() -> None:
        made["runs"] += 1
        time.sleep(1e-3)

    def before() -> None:
        made["before"] += 1

    t = block_timings({"x": run}, blocks=2, runs_per_block=2, before={"x": before}, calls=5)
    assert made["runs"] == 2 * (2 + 1) * 5 and made["before"] == 2 * (2 + 1)
    assert t["x"].calls == 5 and 0.9e-3 <= t["x"].median_s < 4e-3, t["x"].median_s
    with pytest.raises(ValueError):
        block_timings({"x": run}, calls=0)


def test_calls_per_round_fills_a_round_from_the_fastest_runner(monkeypatch) -> None:  # noqa: ANN001
    """opfuse.measure.rounds on a simulated clock (the machine's own is shared and noisy): a
    20 us runner beside a 2 ms one gets 200 / 20 = 10 calls a round (the slow one does not
    change it); a runner slower than a round gets 1; the figures are per call."""
    import types

    from opfuse.measure import rounds

    now = [0.0]
    clock = types.SimpleNamespace(perf_counter=lambda: now[0], thread_time=lambda: now[0])
    monkeypatch.setattr(rounds, "time", clock)

    def costing(seconds: float):  # noqa: ANN202
        def call() -> None:
            now[0] += seconds
        return (lambda: None), call

    assert rounds.calls_per_round({"fast": costing(20e-6), "slow": costing(2e-3)}) == 10
    assert rounds.calls_per_round({"slow": costing(1e-3)}) == 1
    times, n = rounds.median_times({"fast": costing(20e-6), "slow": costing(2e-3)}, rounds=3)
    assert n == 10
    assert times["fast"] == pytest.approx((20e-6, 20e-6)) and times["slow"][0] == pytest.approx(2e-3)
    assert rounds.sig4(0.0012345) == "1.234" and rounds.sig4(2.5e-6, 1e-6) == "2.5"


def _simulated(monkeypatch):  # noqa: ANN001, ANN202
    """opfuse.measure.rounds' clock replaced by one that only calls advance (``now[0]``)."""
    import types

    from opfuse.measure import rounds

    now = [0.0]
    monkeypatch.setattr(rounds, "time", types.SimpleNamespace(perf_counter=lambda: now[0],
                                                              thread_time=lambda: now[0]))
    return now


def test_block_timings_drop_each_blocks_cold_run_on_a_simulated_clock(monkeypatch) -> None:  # noqa: ANN001
    """block_timings runs on rounds.timed_runs: with a clock only the calls advance, a run after
    another runner's costs 5x (cold caches), the block's next runs 1x: the cold run is dropped
    in every block, whichever runner goes first, and ``before`` is untimed."""
    now = _simulated(monkeypatch)
    last = [None]

    def costing(name: str, seconds: float):  # noqa: ANN202
        def call() -> None:
            now[0] += seconds * (5 if last[0] != name else 1)
            last[0] = name
        return call

    def before() -> None:
        now[0] += 1.0  # untimed: a second would swamp every figure

    t = block_timings({"a": costing("a", 1e-3), "b": costing("b", 3e-3)}, blocks=4,
                      runs_per_block=2, before={"a": before, "b": before}, calls=2)
    # calls=2: a run's second call is warm, so a cold run reads (5 + 1) / 2 = 3x; kept, it
    # would move the median of a block's 2 runs to 2x
    assert t["a"].median_s == pytest.approx(1e-3) and t["a"].spread < 1e-6
    assert t["b"].median_s == pytest.approx(3e-3) and t["b"].high_s == pytest.approx(3e-3)


def test_round_times_alternate_and_drop_the_first_round_on_a_simulated_clock(monkeypatch) -> None:  # noqa: ANN001
    """round_times: the runners' order reverses round by round, the first round (the only one
    where a runner starts cold here) is dropped, CPU and wall read per call."""
    from opfuse.measure import rounds

    now = _simulated(monkeypatch)
    order: list[str] = []
    seen: set[str] = set()

    def costing(name: str, seconds: float):  # noqa: ANN202
        def call() -> None:
            now[0] += seconds * (1 if name in seen else 7)
            seen.add(name)
            order.append(name)
        return (lambda: None), call

    got = rounds.round_times({"a": costing("a", 1e-3), "b": costing("b", 2e-3)}, rounds=3, calls=2)
    assert [order[i] for i in range(0, len(order), 2)] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert got["a"] == [pytest.approx((1e-3, 1e-3))] * 3
    assert got["b"] == [pytest.approx((2e-3, 2e-3))] * 3
