"""Static shape and dtype inference: every value must end with a fully known shape and dtype.

onnx's C++ inference does the work. Its result is merged back by value name, which is linear in the
graph (onnx_ir's ShapeInferencePass re-reads the whole inferred model, several times slower on 10k-node
graphs).
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from opfuse.errors import OpfuseError
from opfuse.ir.expand import to_portable_proto
from opfuse.quant import is_quantized


def infer_shapes(model: ir.Model) -> None:
    """Fill shapes and dtypes in place with onnx's inference (data propagation on).

    A quantized graph (docs/architecture.md, "int8 in the IR": Conv on int8) is not valid ONNX, so
    onnx cannot infer it: it is left as it is (the QDQ fold and every rewrite set their shapes and
    dtypes themselves), and ``require_static`` names any value still unknown."""
    if is_quantized(model):
        return
    proto = to_portable_proto(model)  # a Gelu / RMSNormalization the opset lacks, written out
    try:
        inferred = onnx.shape_inference.infer_shapes(
            proto, check_type=True, strict_mode=True, data_prop=True
        )
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OpfuseError(f"shape inference failed: {msg}") from None
    types = {vi.name: vi.type for vi in inferred.graph.value_info}
    types.update((vi.name, vi.type) for vi in inferred.graph.output)
    for node in model.graph:
        for value in node.outputs:
            tp = types.get(value.name)
            if tp is None or not tp.HasField("tensor_type"):
                continue
            tensor = tp.tensor_type
            if tensor.elem_type:
                value.dtype = ir.DataType(tensor.elem_type)
            if tensor.HasField("shape"):
                inferred_shape = ir.Shape(
                    [
                        d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                        for d in tensor.shape.dim
                    ]
                )
                if value.shape is None or not _all_static(value.shape):
                    value.shape = inferred_shape


def _all_static(shape: ir.Shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def _dim_text(dim: object) -> str:
    return f"'{dim}'" if str(dim) not in ("", "None") else "unknown"


def require_static(model: ir.Model, where: str = "", allow_unknown: bool = False) -> tuple[str, ...]:
    """Raise naming the first value (graph input, node output) without a static shape or dtype.

    With ``allow_unknown``, node outputs may stay unknown (what a custom-domain op, or a Loop,
    produces when nothing says its size): they are returned, and the stages downstream treat
    them as opaque and of unknown size (docs/architecture.md). Graph inputs must be static."""
    prefix = f"{where}: " if where else ""
    graph = model.graph
    for value in graph.inputs:
        _check_value(value, prefix, "input")
    unknown: list[str] = []
    for node in graph:
        for value in node.outputs:
            if not value.uses() and not value.is_graph_output():
                continue  # an unused optional output (Dropout's mask, ...) needs no shape
            _refuse_negative(value, prefix, f"output of node '{node.name}' ({node.op_type})")
            if allow_unknown:
                if not is_static(value):
                    unknown.append(value.name)
                continue
            _check_value(value, prefix, f"output of node '{node.name}' ({node.op_type})")
    return tuple(unknown)


def is_static(value: ir.Value) -> bool:
    """Whether ``value`` has a dtype and a fully known shape (its size in bytes is known)."""
    return value.dtype is not None and value.shape is not None and _all_static(value.shape) and all(
        d >= 0 for d in value.shape
    )


def unknown_size_values(model: ir.Model) -> tuple[str, ...]:
    """The node outputs whose size is not known (see ``require_static(allow_unknown=True)``)."""
    return require_static(model, allow_unknown=True)


def unknown_size_producer(model: ir.Model) -> ir.Node | None:
    """The first node with an output of unknown size, in graph order (for one-line errors)."""
    unknown = set(unknown_size_values(model))
    return next((n for n in model.graph if any(v.name in unknown for v in n.outputs)), None)


def _refuse_negative(value: ir.Value, prefix: str, role: str) -> None:
    """A dimension below zero (inference of a Pad with negative pads, a Slice past its end...) is
    no size at all: every buffer and copy length the C derives from it would be wrong, so it is
    refused at import, before any stage sizes anything."""
    for axis, dim in enumerate(value.shape or ()):
        if isinstance(dim, int) and dim < 0:
            raise OpfuseError(f"{prefix}value '{value.name}' ({role}) dim {axis} is {dim}: "
                              "a tensor dimension cannot be negative")


def _check_value(value: ir.Value, prefix: str, role: str) -> None:
    _refuse_negative(value, prefix, role)
    if value.dtype is None:
        raise OpfuseError(f"{prefix}value '{value.name}' ({role}) has no known dtype")
    if value.shape is None:
        raise OpfuseError(
            f"{prefix}value '{value.name}' ({role}) has no known shape; "
            "give it with --input-shape NAME=DIMS or add value_info to the model"
        )
    for axis, dim in enumerate(value.shape):
        if not isinstance(dim, int):
            raise OpfuseError(
                f"{prefix}value '{value.name}' ({role}) dim {axis} is dynamic ({_dim_text(dim)}); "
                "bind it with --input-shape NAME=DIMS"
            )
