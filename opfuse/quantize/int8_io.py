"""int8 graph inputs and outputs (``--io int8``, docs/quantize.md "int8 inputs and outputs").

The TFLite converter's ``inference_input_type`` / ``inference_output_type = tf.int8``: the model
takes and returns int8 with the scale and zero point of the tensors at its boundary, so the
caller quantizes its input (and dequantizes its output) once, outside, and the int8 C holds no
float copy of either. On the QDQ graph ``insert_qdq`` wrote (placement.py):

    x (float) -> QuantizeLinear -> x_q -> DequantizeLinear -> ...   becomes   x (int8) -> DQ -> ...
    ... -> QuantizeLinear -> y_q -> DequantizeLinear -> y (float)   becomes   ... -> Q -> y (int8)

Every other node is unchanged, so the int8 model computes exactly what the float-I/O one does
between its boundary Q and DQ. A graph output that stayed float (its op has no int8 form) stays
float and is listed so. A graph output also read inside the graph keeps a DequantizeLinear for
those readers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from opfuse.fresh_names import fresh_name

IO_CHOICES = ("float", "int8")


@dataclass(frozen=True)
class IoTensor:
    """One graph input or output of the written model, and how to feed or read it."""

    name: str
    role: str  # "input" or "output"
    dtype: str  # "int8" or "float32"
    scale: float | None = None  # int8: real = scale * (q - zero_point)
    zero_point: int | None = None

    def to_json(self) -> dict:
        entry = {"name": self.name, "role": self.role, "dtype": self.dtype}
        if self.dtype == "int8":
            entry.update(scale=self.scale, zero_point=self.zero_point)
        return entry

    def describe(self) -> str:
        """How the terminal says it (the name is the caller's to sanitize)."""
        if self.dtype != "int8":
            return "float32 (no int8 form at this boundary)"
        how = ("q = clamp(round(x / scale) + zero_point, -128, 127)" if self.role == "input"
               else "x = scale * (q - zero_point)")
        return f"int8, scale {self.scale!r}, zero point {self.zero_point} ({how})"


def _scalar(inits: dict[str, TensorProto], name: str) -> float | int:
    return numpy_helper.to_array(inits[name]).reshape(-1)[0].item()


def _set_type(values, name: str, elem_type: int) -> None:  # noqa: ANN001 (repeated ValueInfo)
    for v in values:
        if v.name == name:
            v.type.tensor_type.elem_type = elem_type


def int8_io(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, list[IoTensor]]:
    """A copy of the QDQ model ``proto`` with int8 inputs and outputs wherever its boundary has a
    QuantizeLinear (inputs) or DequantizeLinear (outputs) of per-tensor int8 parameters; and
    every graph input and output as the copy has it."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    inits = {i.name: i for i in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    producer = {o: n for n in graph.node for o in n.output}
    drop: set[int] = set()
    io: list[IoTensor] = []
    for inp in graph.input:
        if inp.name in inits:
            continue
        users = readers.get(inp.name, [])
        if len(users) == 1 and users[0].op_type == "QuantizeLinear" and _int8(users[0], inits):
            q = users[0]
            for dq in readers.get(q.output[0], []):  # each reads the int8 input directly
                dq.input[0] = inp.name
            drop.add(id(q))
            inp.type.tensor_type.elem_type = TensorProto.INT8
            io.append(IoTensor(inp.name, "input", "int8", float(_scalar(inits, q.input[1])),
                               int(_scalar(inits, q.input[2]))))
        else:
            io.append(IoTensor(inp.name, "input", "float32"))
    for o in graph.output:
        dq = producer.get(o.name)
        if dq is None or dq.op_type != "DequantizeLinear" or not _int8(dq, inits):
            io.append(IoTensor(o.name, "output", "float32"))
            continue
        q_out = dq.input[0]
        q = producer.get(q_out)
        if q is None or q.op_type != "QuantizeLinear":  # a constant output: nothing to feed it
            io.append(IoTensor(o.name, "output", "float32"))
            continue
        inner = readers.get(o.name, [])
        if inner:  # read inside the graph too: they keep a float copy through the DQ
            fresh = fresh_name({*producer, *inits, *readers}, f"{o.name}_dequantized")
            dq.output[0] = fresh
            dq.input[0] = o.name
            for node in inner:
                node.input[:] = [fresh if i == o.name else i for i in node.input]
        else:
            drop.add(id(dq))
        for node in graph.node:  # the QuantizeLinear writes the graph output itself
            node.output[:] = [o.name if v == q_out else v for v in node.output]
            if node is not dq:
                node.input[:] = [o.name if v == q_out else v for v in node.input]
        o.type.tensor_type.elem_type = TensorProto.INT8
        io.append(IoTensor(o.name, "output", "int8", float(_scalar(inits, dq.input[1])),
                           int(_scalar(inits, dq.input[2]))))
    kept = [n for n in graph.node if id(n) not in drop]
    del graph.node[:]
    graph.node.extend(kept)
    for v in io:
        _set_type(graph.value_info, v.name, TensorProto.INT8 if v.dtype == "int8"
                  else TensorProto.FLOAT)
    return out, io


def float_io(proto: onnx.ModelProto) -> list[IoTensor]:
    """Every graph input and output of a float-I/O model, described as ``int8_io`` does."""
    inits = {i.name for i in proto.graph.initializer}
    return ([IoTensor(i.name, "input", "float32") for i in proto.graph.input if i.name not in inits]
            + [IoTensor(o.name, "output", "float32") for o in proto.graph.output])


def _int8(node: onnx.NodeProto, inits: dict[str, TensorProto]) -> bool:
    """A per-tensor Q/DQ with an int8 zero point held in the initializers."""
    if len(node.input) < 3 or node.input[1] not in inits or node.input[2] not in inits:
        return False
    zp, scale = inits[node.input[2]], inits[node.input[1]]
    return zp.data_type == TensorProto.INT8 and int(np.prod(scale.dims, dtype=np.int64)) == 1


def quantize_feed(x: np.ndarray, io: IoTensor) -> np.ndarray:
    """A float sample as the int8 input ``io`` takes it (QuantizeLinear: half to even)."""
    if io.dtype != "int8":
        return x
    q = np.rint(x.astype(np.float32) / np.float32(io.scale)) + io.zero_point
    return np.clip(q, -128, 127).astype(np.int8)


def dequantize_output(q: np.ndarray, io: IoTensor) -> np.ndarray:
    """An int8 output ``io`` as the float the float-I/O model returns (DequantizeLinear)."""
    if io.dtype != "int8":
        return q
    return ((q.astype(np.int32) - io.zero_point).astype(np.float32) * np.float32(io.scale))
