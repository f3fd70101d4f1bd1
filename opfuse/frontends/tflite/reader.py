"""Read a .tflite flatbuffer into plain Python objects (docs/architecture.md, "Layout of TFLite models").

Only the first subgraph is read (the main graph; control-flow subgraphs are refused by their op).
Nothing is interpreted here beyond decoding: shapes stay NHWC, quantization stays as stored.

Everything later stages read is decoded here, option tables and sparsity included (tables.py), and
checked (checks.py: indices, buffers, scales, strides), so a corrupt file is one line naming the
tensor or operator at fault, and no flatbuffer read happens after the reader returns.
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from opfuse.errors import OpfuseError
from opfuse.frontends.limits import refuse
from opfuse.frontends.tflite.checks import check_operator, check_shape, check_tensor
from opfuse.frontends.tflite.tables import Options, Sparsity, decode_options, decode_sparsity

_IDENTIFIER = b"TFL3"


@dataclass(frozen=True, eq=False)
class TensorQuant:
    """real = scale * (q - zero_point); per channel along ``dim`` when scale has several entries."""

    scale: np.ndarray  # float32 (n,)
    zero_point: np.ndarray  # int64 (n,)
    dim: int


@dataclass(frozen=True, eq=False)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    data: np.ndarray | None  # constant contents (shaped), None for activations
    quant: TensorQuant | None
    sparsity: Sparsity | None = None  # the format of a sparse constant


@dataclass(frozen=True, eq=False)
class Operator:
    index: int
    opcode: str  # builtin name such as CONV_2D, or CUSTOM
    custom_code: str
    inputs: tuple[int, ...]  # tensor indices, -1 for an omitted optional input
    outputs: tuple[int, ...]
    options: Options | None  # the builtin's options table, decoded, or None
    custom_options: bytes = b""


@dataclass(frozen=True, eq=False)
class TfliteModel:
    path: str
    tensors: tuple[Tensor, ...]
    operators: tuple[Operator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    description: str = ""
    signature: dict = field(default_factory=dict)


def _dtypes() -> dict[int, np.dtype]:
    from tflite.TensorType import TensorType as T

    table = {
        T.FLOAT32: np.float32, T.FLOAT16: np.float16, T.FLOAT64: np.float64,
        T.INT32: np.int32, T.INT64: np.int64, T.INT16: np.int16, T.INT8: np.int8,
        T.UINT8: np.uint8, T.BOOL: np.bool_, T.UINT16: np.uint16, T.UINT32: np.uint32,
    }
    return {k: np.dtype(v) for k, v in table.items()}


def _names(enum: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_")}


def read_tflite_file(path: str | Path) -> TfliteModel:
    """Decode ``path``; a truncated or foreign file raises OpfuseError naming it."""
    path = Path(path)
    if not path.is_file():
        raise OpfuseError(f"{path}: no such file")
    data = path.read_bytes()
    if len(data) < 8 or data[4:8] != _IDENTIFIER:
        raise OpfuseError(f"{path}: not a TFLite model (no 'TFL3' flatbuffer identifier)")
    try:
        return _decode(data, str(path))
    except OpfuseError as exc:
        text = str(exc)
        raise OpfuseError(text if text.startswith(str(path)) else f"{path}: {text}") from None
    except DECODE_ERRORS as exc:  # flatbuffers reads past the end as IndexError / struct.error
        raise OpfuseError(f"{path}: cannot decode the TFLite flatbuffer {corrupt(exc)}") from None


# What reading a corrupt flatbuffer raises inside the tflite and flatbuffers packages
DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, KeyError, AttributeError,
                 OverflowError, ZeroDivisionError, UnicodeDecodeError, MemoryError, RecursionError)


def corrupt(exc: BaseException) -> str:
    return f"(truncated or corrupt: {type(exc).__name__})"


@contextmanager
def _decoding(what: str):
    """Errors while decoding ``what`` (a tensor, an operator) become one line naming it."""
    try:
        yield
    except OpfuseError as exc:
        text = str(exc)
        raise OpfuseError(text if text.startswith(what.split(" (")[0]) else f"{what}: {text}") \
            from None
    except DECODE_ERRORS as exc:
        raise OpfuseError(f"{what}: cannot decode it {corrupt(exc)}") from None


def _decode(data: bytes, path: str) -> TfliteModel:
    import tflite
    from tflite.BuiltinOperator import BuiltinOperator
    from tflite.BuiltinOptions import BuiltinOptions

    model = tflite.Model.GetRootAsModel(data, 0)
    if model.SubgraphsLength() < 1:
        raise OpfuseError(f"{path}: TFLite model has no subgraph")
    graph = model.Subgraphs(0)
    _check_weight_bytes(model, graph, path)
    dtypes = _dtypes()
    type_names = _names(tflite.TensorType)
    tensors = []
    for i in range(graph.TensorsLength()):
        with _decoding(f"tensor {i}"):
            tensors.append(_tensor(model, data, graph.Tensors(i), i, dtypes, type_names))
    op_names = _names(BuiltinOperator)
    option_names = _names(BuiltinOptions)
    operators = []
    for k in range(graph.OperatorsLength()):
        with _decoding(f"operator {k}"):
            op = graph.Operators(k)
            opcode_index = int(op.OpcodeIndex())
            if not 0 <= opcode_index < model.OperatorCodesLength():
                raise OpfuseError(f"operator {k}: opcode index {opcode_index} is out of range "
                                  f"(the model has {model.OperatorCodesLength()} operator codes)")
            code = model.OperatorCodes(opcode_index)
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            opcode = op_names.get(builtin, f"BUILTIN_{builtin}")
        with _decoding(f"operator {k} ({opcode})"):
            operators.append(_operator(op, k, opcode, _text(code.CustomCode()), option_names))
        check_operator(operators[-1], len(tensors))
    for index in _indices(graph.InputsAsNumpy, graph.InputsLength()) + _indices(
        graph.OutputsAsNumpy, graph.OutputsLength()
    ):
        if not 0 <= index < len(tensors):
            raise OpfuseError(f"{path}: graph refers to tensor {index}, which does not exist")
    return TfliteModel(
        path=path,
        tensors=tuple(tensors),
        operators=tuple(operators),
        inputs=tuple(_indices(graph.InputsAsNumpy, graph.InputsLength())),
        outputs=tuple(_indices(graph.OutputsAsNumpy, graph.OutputsLength())),
        description=_text(model.Description()),
    )


def _check_weight_bytes(model, graph, path: str) -> None:
    """The constant bytes the tensors will hold, one buffer per reference (the tensor vector may
    point N times at one tensor, or N tensors at one buffer: each becomes its own constant), held
    to the weights limit from the buffers' sizes before any data is read."""
    sizes: dict[int, int] = {}
    total = 0
    for i in range(graph.TensorsLength()):
        index = int(graph.Tensors(i).Buffer())
        if index not in sizes:
            buf = model.Buffers(index) if 0 < index < model.BuffersLength() else None
            sizes[index] = 0 if buf is None else (
                int(buf.Size()) if int(buf.Offset()) > 1 else int(buf.DataLength()))
        total += sizes[index]
        refuse(f"{path}: the constant data of tensors 0 to {i} ({len(sizes)} distinct buffers, "
               "one copy per tensor)", total, "weights")


def _tensor(model, data: bytes, t, i: int, dtypes: dict, type_names: dict) -> Tensor:
    if t.Type() not in dtypes:
        raise OpfuseError(
            f"tensor {i} '{_text(t.Name())}' has type "
            f"{type_names.get(t.Type(), t.Type())}, which opfuse does not read"
        )
    dtype = dtypes[t.Type()]
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    name = _text(t.Name()) or f"t{i}"
    check_shape(i, name, shape)
    sparse = t.Sparsity()
    tensor = Tensor(
        index=i,
        name=name,
        shape=shape,
        dtype=dtype,
        data=_buffer(model, data, t.Buffer(), dtype, shape, sparse is not None),
        quant=_quant(t.Quantization()),
        sparsity=decode_sparsity(sparse) if sparse is not None else None,
    )
    check_tensor(tensor)
    return tensor


def _operator(op, k: int, opcode: str, custom_code: str, option_names: dict) -> Operator:
    options = None
    table = op.BuiltinOptions()
    kind = option_names.get(op.BuiltinOptionsType())
    if table is not None and kind is not None:
        options = decode_options(kind, table)
    custom = op.CustomOptionsAsNumpy() if op.CustomOptionsLength() else None
    return Operator(
        index=k,
        opcode=opcode,
        custom_code=custom_code,
        inputs=tuple(int(i) for i in op.InputsAsNumpy()) if op.InputsLength() else (),
        outputs=tuple(int(i) for i in op.OutputsAsNumpy()) if op.OutputsLength() else (),
        options=options,
        custom_options=bytes(custom.tobytes()) if custom is not None else b"",
    )


def _indices(getter, length: int) -> list[int]:
    return [int(i) for i in getter()] if length else []


def _text(raw) -> str:
    if raw is None:
        return ""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _buffer(model, data: bytes, index: int, dtype: np.dtype, shape, sparse: bool):
    if not 0 <= index < model.BuffersLength():
        raise OpfuseError(f"buffer {index} does not exist (the model has {model.BuffersLength()})")
    if index == 0:
        return None  # buffer 0 is the empty sentinel: an activation
    buf = model.Buffers(index)
    offset, size = int(buf.Offset()), int(buf.Size())
    if offset > 1:  # large models keep constants after the flatbuffer
        raw = np.frombuffer(data[offset : offset + size], dtype=np.uint8)
        if raw.size != size:
            raise OpfuseError("constant data runs past the end of the file")
    elif buf.DataLength():
        raw = buf.DataAsNumpy()
    else:
        return None
    array = np.frombuffer(raw.tobytes(), dtype=dtype)
    if sparse:
        return array.copy()  # stored values only; DENSIFY expands them
    count = int(np.prod(shape)) if shape else 1
    if array.size != count:
        raise OpfuseError(f"constant holds {array.size} values, its shape {list(shape)} needs {count}")
    return array.reshape(shape).copy()


def _quant(q) -> TensorQuant | None:
    if q is None or not q.ScaleLength():
        return None
    scale = q.ScaleAsNumpy().astype(np.float32)
    zero = q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength() else np.zeros_like(scale, np.int64)
    if zero.size == 1 and scale.size > 1:
        zero = np.full(scale.shape, int(zero[0]), dtype=np.int64)
    return TensorQuant(scale=scale, zero_point=zero, dim=int(q.QuantizedDimension()))
