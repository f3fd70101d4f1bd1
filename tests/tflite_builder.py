"""Write small int8 TFLite models (one or a few ops) with the flatbuffers Builder, to run in TFLite
Micro as the reference for the int8 C kernels.

The installed ``tflite`` package has readers only, so the tables are written here by field slot
(slot numbers from the TFLite schema, as the package's readers use them). Layout NHWC, filters
OHWI (depthwise 1HWO), as TFLite stores them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import flatbuffers
import numpy as np

# BuiltinOperator codes and BuiltinOptions union types (TFLite schema)
OPS = {"ADD": 0, "AVERAGE_POOL_2D": 1, "CONCATENATION": 2, "CONV_2D": 3, "DEPTHWISE_CONV_2D": 4,
       "DEQUANTIZE": 6, "FULLY_CONNECTED": 9, "LOGISTIC": 14, "MAX_POOL_2D": 17, "MUL": 18,
       "RESHAPE": 22, "SOFTMAX": 25, "TANH": 28, "PAD": 34, "MEAN": 40, "SUB": 41,
       "LEAKY_RELU": 98, "QUANTIZE": 114, "HARD_SWISH": 117}
ACT = {None: 0, "relu": 1, "relu_n1_to_1": 2, "relu6": 3}
PAD = {"SAME": 0, "VALID": 1}
TYPES = {np.dtype(np.float32): 0, np.dtype(np.int32): 2, np.dtype(np.uint8): 3,
         np.dtype(np.int64): 4, np.dtype(np.int8): 9}


@dataclass
class Tensor:
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    axis: int = 0
    data: np.ndarray | None = None


@dataclass
class Op:
    code: str
    inputs: list[int]
    outputs: list[int]
    options: tuple[int, list[tuple[str, int, object]]] | None = None  # (union type, fields)


@dataclass
class TFLiteModel:
    tensors: list[Tensor] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def tensor(self, shape, dtype, scale=None, zero_point=None, axis=0, data=None) -> int:
        s = None if scale is None else np.atleast_1d(np.asarray(scale, np.float32))
        z = None
        if s is not None:
            z = np.atleast_1d(np.asarray(0 if zero_point is None else zero_point, np.int64))
            if z.size == 1 and s.size > 1:
                z = np.zeros(s.size, np.int64) + z[0]
        self.tensors.append(Tensor(tuple(int(d) for d in shape), np.dtype(dtype), s, z, axis,
                                   None if data is None else np.asarray(data, dtype)))
        return len(self.tensors) - 1

    def op(self, code: str, inputs: list[int], outputs: list[int], options=None) -> None:
        self.ops.append(Op(code, inputs, outputs, options))

    def to_bytes(self) -> bytes:
        return _write(self)


def _vec(b: flatbuffers.Builder, values, kind: str) -> int:
    size = {"i": 4, "l": 8, "f": 4, "B": 1}[kind]
    b.StartVector(size, len(values), size)
    for v in reversed(list(values)):
        {"i": b.PrependInt32, "l": b.PrependInt64, "f": b.PrependFloat32,
         "B": b.PrependUint8}[kind](v)
    return b.EndVector()


def _table(b: flatbuffers.Builder, fields: list[tuple[str, int, object]]) -> int:
    """A table from (kind, slot, value): kind 'o' offset, 'i' int32, 'b' int8/bool, 'f' float."""
    b.StartObject(max((s for _, s, _ in fields), default=-1) + 1)
    for kind, slot, value in fields:
        if kind == "o":
            b.PrependUOffsetTRelativeSlot(slot, value, 0)
        elif kind == "i":
            b.PrependInt32Slot(slot, int(value), -12345)
        elif kind == "b":
            b.PrependInt8Slot(slot, int(value), -123)
        elif kind == "B":
            b.PrependUint8Slot(slot, int(value), 255)
        elif kind == "f":
            b.PrependFloat32Slot(slot, float(value), -1.5e30)
    return b.EndObject()


def _write(m: TFLiteModel) -> bytes:
    b = flatbuffers.Builder(1024)
    # buffers: 0 is the empty sentinel, then one per constant tensor
    buffer_index, buffers = [], [_table(b, [])]
    for t in m.tensors:
        if t.data is None:
            buffer_index.append(0)
            continue
        raw = np.ascontiguousarray(t.data).astype(t.dtype.newbyteorder("<")).tobytes()
        b.StartVector(1, len(raw), 16)
        b.head = b.head - len(raw)
        b.Bytes[b.head : b.head + len(raw)] = raw
        data = b.EndVector()
        buffers.append(_table(b, [("o", 0, data)]))
        buffer_index.append(len(buffers) - 1)
    tensors = []
    for i, t in enumerate(m.tensors):
        shape = _vec(b, t.shape, "i")
        name = b.CreateString(f"t{i}")
        quant = None
        if t.scale is not None:
            sc = _vec(b, t.scale.tolist(), "f")
            zp = _vec(b, t.zero_point.tolist(), "l")
            quant = _table(b, [("o", 2, sc), ("o", 3, zp), ("i", 6, t.axis)])
        fields = [("o", 0, shape), ("b", 1, TYPES[t.dtype]), ("i", 2, buffer_index[i]),
                  ("o", 3, name)]
        if quant is not None:
            fields.append(("o", 4, quant))
        tensors.append(_table(b, fields))
    codes = sorted({op.code for op in m.ops}, key=list(OPS).index)
    code_tabs = [_table(b, [("b", 0, min(OPS[c], 127)), ("i", 2, 1), ("i", 3, OPS[c])])
                 for c in codes]
    ops = []
    for op in m.ops:
        ins, outs = _vec(b, op.inputs, "i"), _vec(b, op.outputs, "i")
        fields = [("i", 0, codes.index(op.code)), ("o", 1, ins), ("o", 2, outs)]
        if op.options is not None:
            utype, ofields = op.options
            resolved = []
            for kind, slot, value in ofields:
                if kind == "vi":
                    resolved.append(("o", slot, _vec(b, value, "i")))
                else:
                    resolved.append((kind, slot, value))
            opt = _table(b, resolved)
            fields += [("B", 3, utype), ("o", 4, opt)]
        ops.append(_table(b, fields))

    def offsets(items: list[int]) -> int:
        b.StartVector(4, len(items), 4)
        for it in reversed(items):
            b.PrependUOffsetTRelative(it)
        return b.EndVector()

    t_vec, o_vec = offsets(tensors), offsets(ops)
    sg = _table(b, [("o", 0, t_vec), ("o", 1, _vec(b, m.inputs, "i")),
                    ("o", 2, _vec(b, m.outputs, "i")), ("o", 3, o_vec),
                    ("o", 4, b.CreateString("main"))])
    sg_vec, code_vec, buf_vec = offsets([sg]), offsets(code_tabs), offsets(buffers)
    desc = b.CreateString("opfuse test")
    model = _table(b, [("i", 0, 3), ("o", 1, code_vec), ("o", 2, sg_vec), ("o", 3, desc),
                       ("o", 4, buf_vec)])
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())


# --- options of the ops the tests build ---

def conv_options(stride=(1, 1), padding="SAME", act=None, dilation=(1, 1)):
    return (1, [("b", 0, PAD[padding]), ("i", 1, stride[1]), ("i", 2, stride[0]),
                ("b", 3, ACT[act]), ("i", 4, dilation[1]), ("i", 5, dilation[0])])


def dw_options(stride=(1, 1), padding="SAME", multiplier=1, act=None, dilation=(1, 1)):
    return (2, [("b", 0, PAD[padding]), ("i", 1, stride[1]), ("i", 2, stride[0]),
                ("i", 3, multiplier), ("b", 4, ACT[act]), ("i", 5, dilation[1]),
                ("i", 6, dilation[0])])


def fc_options(act=None):
    return (8, [("b", 0, ACT[act])])


def add_options(act=None):
    return (11, [("b", 0, ACT[act])])


def sub_options(act=None):
    return (28, [("b", 0, ACT[act])])


def mul_options(act=None):
    return (21, [("b", 0, ACT[act])])


def pool_options(kernel, stride, padding="VALID", act=None):
    return (5, [("b", 0, PAD[padding]), ("i", 1, stride[1]), ("i", 2, stride[0]),
                ("i", 3, kernel[1]), ("i", 4, kernel[0]), ("b", 5, ACT[act])])


def softmax_options(beta=1.0):
    return (9, [("f", 0, beta)])


def reducer_options(keep_dims=True):
    return (27, [("b", 0, int(keep_dims))])


def concat_options(axis, act=None):
    return (10, [("i", 0, axis), ("b", 1, ACT[act])])


def leaky_relu_options(alpha):
    return (75, [("f", 0, alpha)])


def run_tflm(model: bytes, runs: list[list[np.ndarray]], count: int = 1) -> list[list[np.ndarray]]:
    """Run ``model`` in TFLite Micro's Python interpreter once per input list; the outputs."""
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_bytes(model)
    results = []
    for inputs in runs:
        for i, x in enumerate(inputs):
            interp.set_input(x, i)
        interp.invoke()
        results.append([np.array(interp.get_output(i)).copy() for i in range(count)])
    return results
