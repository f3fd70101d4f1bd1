"""The vocabulary of refusals: every unfused edge's Decision (``opfuse.schedule``) has one of these."""

from __future__ import annotations

# The vocabulary of refusals (docs/architecture.md, "Refusals"). Reports group decisions by these.
REASONS: dict[str, str] = {
    "multiple_consumers": "the value is read by several nodes, so it must be stored",
    "graph_output": "the value is a graph output, so it must be stored",
    "not_supported_by_target": "the target has no kernel that runs both ops as one",
    "opaque_op": "an op opfuse does not know (custom or unsupported), or a recurrence (LSTM, GRU), blocks fusion",
    "non_constant_weights": "weights are not constants, so they cannot be folded at compile time",
    "dynamic_shape": "a dimension is not known at compile time",
    "dtype_mismatch": "producer and consumer work in different element types",
    "chain_limit": "the kernel already holds as many ops as the target allows",
    "layout_change": "a data-movement op (reshape, transpose, ...) changes the layout between them",
    "other_producer_fused": "the consumer already joined the kernel of another of its producers",
    # attention cores (scores, scale, mask, softmax, weighted sum as one kernel: fusion/attention.py)
    "attention_softmax_axis": "the Softmax between two MatMuls does not run over the keys (the "
    "scores' last axis), so its rows cannot be streamed",
    "attention_mask": "an operand of the scores (scale or mask) does not broadcast over them",
    # cascades (several anchors streamed in bands of rows, opfuse/fusion/cascade.py)
    "cascade_global_op": "the op needs its whole input (global pool, reduction, reshape, matrix "
    "product) or is one the row scheduler does not stream, so no cascade passes through it",
    "cascade_no_gain": "streaming this edge would not lower the peak arena: the ring buffer is as "
    "large as the tensor it replaces, or the cut keeps the peak lower",
    "cascade_limit": "the cascade already holds as many anchors as the target allows",
}


