"""The shapes a .tflite file declares beside the shapes its ops compute (docs/architecture.md,
"Layout of TFLite models").

A TFLite file stores every tensor's shape, and the ops' options and weights imply them again. When
the two disagree (a stride, a weight dimension or a tensor index that a corrupt file changed), the
later stages would build kernels from one and buffers from the other; the import refuses such a
file instead, with one line naming the operator whose output does not match.
"""

from __future__ import annotations

import onnx

from opfuse.errors import OpfuseError
from opfuse.frontends.tflite import layout as L
from opfuse.frontends.tflite.graph import Graph


def _static_shapes(proto: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    try:
        graph = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True,
                                                  data_prop=True).graph
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as exc:
        text = str(exc).strip().splitlines()
        raise OpfuseError(f"shape inference failed: {text[0] if text else type(exc).__name__}") \
            from None
    out = {}
    for vi in list(graph.value_info) + list(graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(int(d.dim_value) for d in dims)
    return out


def check_declared_shapes(g: Graph, proto: onnx.ModelProto) -> None:
    """Every operator output's declared shape equals what inference computes for its IR value."""
    try:
        shapes = _static_shapes(proto)
    except OpfuseError as exc:
        raise OpfuseError(f"{g.model.path}: {exc}") from None
    for op in g.model.operators:
        for index in op.outputs:
            forms = g.forms.get(index)
            if not forms or index not in g.home:
                continue  # folded at import: a constant, whose shape numpy gave
            layout = g.home[index]
            got = shapes.get(forms[layout])
            t = g.tensor(index)
            if got is None or got == L.permute(t.shape, layout):
                continue
            computed = L.permute(got, L.inverse(layout))
            raise OpfuseError(
                f"{g.model.path}: operator {op.index} ({op.opcode}): output tensor {index} "
                f"'{t.name}' is declared {list(t.shape)}, but its inputs and options give "
                f"{list(computed)}"
            )
