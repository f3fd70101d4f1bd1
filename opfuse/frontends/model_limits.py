"""The limits of opfuse/frontends/limits.py for a model opfuse runs without importing it
(``validate ORIGINAL OPTIMIZED`` hands both to onnxruntime): the same window and size checks as
the import, on shapes inferred here (docs/architecture.md, "Outputs and limits")."""

from __future__ import annotations

import onnx

from opfuse.frontends.large_proto import INFERENCE_ERRORS, infer_shapes
from opfuse.frontends.size_check import check_sizes, value_shapes
from opfuse.frontends.window_check import check_windows


def check_model_limits(proto: onnx.ModelProto, where: str) -> None:
    """Refuse, with one line naming the node or input, what would make a runtime allocate past
    the limits. A model inference cannot read is left to the runtime's own error."""
    check_windows(proto, where)
    try:
        inferred = infer_shapes(proto, where, data_prop=True)
    except INFERENCE_ERRORS:
        return
    values = value_shapes(inferred.graph)
    check_windows(inferred, where, values)
    check_sizes(inferred, where, values)
