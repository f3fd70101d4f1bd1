"""onnxruntime sessions the way every measurement in opfuse runs them: CPU, one thread, sequential.

One place, so a benchmark, calibration and validation can never disagree on how a model was run.
"""

from __future__ import annotations

from pathlib import Path

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
