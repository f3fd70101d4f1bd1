"""opfuse.measure.sessions.block_timings: identical runners come out within noise of 1.0x, a slower one
does not, and the first run of each block is dropped."""

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
