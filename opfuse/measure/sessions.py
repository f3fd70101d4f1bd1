"""onnxruntime sessions the way every measurement in opfuse runs them: CPU, one thread, sequential.

One place, so a benchmark, calibration and validation can never disagree on how a model was run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from opfuse.measure.rounds import timed_runs, wall_clock

DISABLE_ALL = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
ENABLE_EXTENDED = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
ENABLE_ALL = ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def one_thread_options(
    level: ort.GraphOptimizationLevel = DISABLE_ALL, dump: str | Path | None = None
) -> ort.SessionOptions:
    """Session options: one intra-op and one inter-op thread, sequential, quiet; ``dump`` writes
    the graph onnxruntime optimized to that path."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # FATAL only: opfuse says why onnxruntime failed in its one line; ORT's own log of the error
    # would reach the terminal raw, with names from the model
    opts.log_severity_level = 4
    if dump is not None:
        opts.optimized_model_filepath = str(dump)
    return opts


def one_thread_session(
    model: onnx.ModelProto | bytes | str | Path,
    level: ort.GraphOptimizationLevel = DISABLE_ALL,
    dump: str | Path | None = None,
) -> ort.InferenceSession:
    """A CPU session of ``model`` (a proto, its bytes, or a path) with one_thread_options."""
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    if isinstance(data, Path):
        data = str(data)
    return ort.InferenceSession(
        data, one_thread_options(level, dump), providers=["CPUExecutionProvider"]
    )


def median_run_s(
    sess: ort.InferenceSession,
    budget_s: float,
    seed: int = 0,
    warmup: int = 2,
    min_runs: int = 5,
    max_runs: int = 2000,
) -> float:
    """Median seconds of ``sess.run`` on seeded normal float32 inputs: ``warmup`` runs, then at
    least ``min_runs`` and as many more as ``budget_s`` allows (at most ``max_runs``)."""
    rng = np.random.default_rng(seed)
    feeds = {
        v.name: rng.standard_normal([int(d) for d in v.shape]).astype(np.float32)
        for v in sess.get_inputs()
    }
    for _ in range(warmup):
        sess.run(None, feeds)
    times: list[float] = []
    end = time.perf_counter() + budget_s
    while len(times) < min_runs or (time.perf_counter() < end and len(times) < max_runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclass(frozen=True)
class BlockTiming:
    """One runner's warm latency from ``block_timings``."""

    median_s: float  # median of the block medians
    low_s: float  # fastest block median
    high_s: float  # slowest block median
    blocks: int
    runs_per_block: int  # timed runs per block (the dropped first run not counted)
    calls: int = 1  # back-to-back calls a timed run makes (the figures are per call)

    @property
    def spread(self) -> float:
        """(slowest - fastest block median) / median: how far the blocks disagree."""
        return (self.high_s - self.low_s) / self.median_s if self.median_s > 0 else 0.0


def block_timings(
    runners: Mapping[str, Callable[[], object]],
    blocks: int = 5,
    runs_per_block: int = 10,
    before: Mapping[str, Callable[[], object]] | None = None,
    calls: int = 1,
) -> dict[str, BlockTiming]:
    """Warm latency of each runner, timed in alternating blocks: in every block each runner runs
    ``runs_per_block + 1`` times back to back and the first run is dropped (it pays for the
    caches the previous runner evicted), so no runner is timed cold while another is timed warm.
    The runners' order reverses every other block. ``before[key]`` runs untimed before each run
    (e.g. writing the inputs into an arena). A run is ``calls`` back-to-back calls, timed
    together and divided by ``calls`` (opfuse.measure.rounds.calls_per_round picks it for a model
    faster than the clock's own jitter). The figure is the median of the block medians; the block
    medians' range is the spread. The loop is opfuse.measure.rounds.timed_runs on the wall clock
    (a block is its pass of ``runs_per_block + 1`` runs), the one bench and the benchmarks share."""
    if blocks < 1 or runs_per_block < 1 or calls < 1:
        raise ValueError("block_timings needs at least one block of one run")
    before = before or {}
    timed = {k: (before.get(k, _nothing), fn) for k, fn in runners.items()}
    got = timed_runs(timed, blocks, runs_per_block + 1, calls, wall_clock)
    # per block, the median of its runs but the first (it pays for the previous runner's caches)
    medians = {k: [statistics.median(wall for wall, in runs[1:]) for runs in passes]
               for k, passes in got.items()}
    return {
        k: BlockTiming(statistics.median(v), min(v), max(v), blocks, runs_per_block, calls)
        for k, v in medians.items()
    }


def _nothing() -> None:
    """No work before a run."""
