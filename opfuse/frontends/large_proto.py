"""Shape inference on a ModelProto past protobuf's 2 GiB. onnx's C++ inference takes the model
serialized, and protobuf cannot serialize a message over 2 GiB (``EncodeError``), which a model
with more than 2 GiB of weights is once its external data is read (``--limit weights=...`` raised).

Inference reads a weight's dims and type, never its values, except the small constants behind
shape arithmetic (Reshape's shape, Slice's starts...). So a model over ``PROTO_LIMIT`` is inferred
with its large ``raw_data`` initializers emptied (dims and type kept), and both the model and the
inferred copy get the data back (docs/architecture.md, "Outputs and limits")."""

from __future__ import annotations

import onnx
from google.protobuf.message import EncodeError

from opfuse.errors import OpfuseError

PROTO_LIMIT = (2 << 30) - (64 << 20)  # protobuf's 2 GiB, less room for the inferred value_info
STRIP_BYTES = 64 << 10  # initializers over this are emptied while inference reads the model
INFERENCE_ERRORS = (onnx.shape_inference.InferenceError, RuntimeError, ValueError)


def infer_shapes(proto: onnx.ModelProto, where: str, **options) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(proto, **options)`` at any size; raises what it raises
    (INFERENCE_ERRORS), or one line naming ``where`` when even the emptied model is too large."""
    if proto.ByteSize() <= PROTO_LIMIT:
        return _infer(proto, where, options)
    emptied = {}
    for tensor in proto.graph.initializer:
        if tensor.ByteSize() > STRIP_BYTES and tensor.HasField("raw_data"):
            emptied[tensor.name] = tensor.raw_data
            tensor.ClearField("raw_data")
    try:
        inferred = _infer(proto, where, options)
    finally:
        _refill(proto, emptied)
    _refill(inferred, emptied)
    return inferred


def _infer(proto: onnx.ModelProto, where: str, options: dict) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(proto, **options)
    except EncodeError:
        raise OpfuseError(f"{where}: the model is over protobuf's 2 GiB even without its large "
                          "weights, which onnx's shape inference cannot read") from None


def _refill(proto: onnx.ModelProto, data: dict[str, bytes]) -> None:
    for tensor in proto.graph.initializer:
        if tensor.name in data:
            tensor.raw_data = data[tensor.name]
