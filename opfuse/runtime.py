"""onnxruntime sessions the way every measurement in opfuse runs them: CPU, one thread, sequential.

One place, so a benchmark, calibration and validation can never disagree on how a model was run.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

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
    opts.log_severity_level = 3
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
