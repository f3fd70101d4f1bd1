"""Timing rounds of back-to-back calls, the way benchmarks/host_runtimes.py and c_revisions.py
time the C beside onnxruntime and LiteRT.

A model that runs in 2-4 us is shorter than what reading the clock costs and varies by: one call
per sample makes ratios of such models noise. So each round times a batch of ``calls`` back-to-back
calls of every runner (the same count for all, so the comparison stays side by side), and the
figure per call is the round's time / ``calls``. By default ``calls`` is chosen from a short warm-up
so that a round of the fastest runner lasts about ``ROUND_S``.

A runner is ``(before, call)``: ``before`` runs once per round, untimed (the C writes its inputs
into the arena there), then ``call`` runs ``calls`` times. Later calls of a batch see the arena as
the previous call left it; an int8 kernel's time does not depend on the values it reads.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

Runner = tuple[Callable[[], object], Callable[[], object]]
ROUND_S = 200e-6  # a round of the fastest runner: well above the clock's cost and jitter
WARMUP_S = 2e-3  # per runner, to measure the calls and warm caches


def _per_call(runner: Runner) -> float:
    """Wall seconds of one call, from calls repeated for about WARMUP_S."""
    before, call = runner
    before()
    call()  # first call: page faults, lazy binding
    n, t0 = 0, time.perf_counter()
    while True:
        call()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= WARMUP_S or n >= 10_000:
            return elapsed / n


def calls_per_round(runners: Mapping[str, Runner], round_s: float = ROUND_S) -> int:
    """The batch that makes the fastest runner's round last about ``round_s`` (at least 1)."""
    fastest = min(_per_call(r) for r in runners.values())
    return max(1, round(round_s / max(fastest, 1e-9)))


Clock = Callable[[], tuple[float, ...]]


def wall_clock() -> tuple[float]:
    """Wall time (s); ``time`` is looked up per call, so a test can replace it."""
    return (time.perf_counter(),)


def cpu_wall_clock() -> tuple[float, float]:
    """(thread CPU time, wall time) (s)."""
    return (time.thread_time(), time.perf_counter())


def timed_runs(runners: Mapping[str, Runner], passes: int, runs: int, calls: int, clock: Clock,
               ) -> dict[str, list[list[tuple[float, ...]]]]:
    """The one timing loop of opfuse's measurements (round_times, sessions.block_timings): per
    runner, per pass, ``runs`` samples of what ``clock`` reads, each the difference across one
    run / ``calls``. In every pass each runner makes its ``runs`` runs in turn, the runners'
    order reversed every other pass; a run is its ``before`` (untimed) then ``calls``
    back-to-back calls timed together. Nothing is dropped here: the callers say what is warm-up."""
    keys = list(runners)
    got: dict[str, list[list[tuple[float, ...]]]] = {k: [] for k in keys}
    for p in range(passes):
        for key in keys if p % 2 == 0 else keys[::-1]:
            before, call = runners[key]
            samples = []
            for _ in range(runs):
                before()
                start = clock()
                for _ in range(calls):
                    call()
                end = clock()
                samples.append(tuple((e - s) / calls for s, e in zip(start, end, strict=True)))
            got[key].append(samples)
    return got


def round_times(runners: Mapping[str, Runner], rounds: int, calls: int,
                ) -> dict[str, list[tuple[float, float]]]:
    """Per runner, ``rounds`` samples of (thread CPU s, wall s) per call, each the time of
    ``calls`` back-to-back calls / ``calls``; runners in alternating order round by round, a
    first round dropped (timed_runs: a round is a pass of one run)."""
    got = timed_runs(runners, rounds + 1, 1, calls, cpu_wall_clock)
    return {k: [(cpu, wall) for (cpu, wall), in passes[1:]] for k, passes in got.items()}


def median_times(runners: Mapping[str, Runner], rounds: int, calls: int | None = None,
                 ) -> tuple[dict[str, tuple[float, float]], int]:
    """Median (thread CPU s, wall s) per call of every runner, and the calls per round used
    (``calls`` None: calls_per_round)."""
    n = calls if calls else calls_per_round(runners)
    got = round_times(runners, rounds, n)
    return {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
            for k, v in got.items()}, n


def sig4(seconds: float, unit: float = 1e-3) -> str:
    """``seconds`` in ``unit`` (ms by default) to 4 significant digits."""
    return f"{seconds / unit:.4g}"
