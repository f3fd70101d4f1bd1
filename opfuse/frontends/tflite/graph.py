"""The state of one TFLite -> ONNX translation: emitted nodes, initializers, and where each TFLite
tensor lives in the IR (its value name and layout).

Quantized tensors (int8/uint8 with scales) become int8/uint8 ONNX values. Every op reads them
through its own DequantizeLinear and writes them through a QuantizeLinear, so each translated op is
one ``DQ -> float op(s) -> Q`` group (docs/architecture.md, "int8 in the IR"). Layout changes of a
quantized tensor are groups of their own (``DQ -> Transpose -> Q``) so the fold sees one op per group.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from opfuse.errors import OpfuseError
from opfuse.fresh_names import fresh_name
from opfuse.frontends.tflite import layout as L
from opfuse.frontends.tflite.reader import Operator, Tensor, TensorQuant, TfliteModel

QUANT_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))


class Graph:
    def __init__(self, model: TfliteModel):
        self.model = model
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self.consts: dict[int, np.ndarray] = {
            t.index: t.data for t in model.tensors if t.data is not None and t.sparsity is None
        }
        self.forms: dict[int, dict[tuple[int, ...], str]] = {}  # tensor -> layout -> IR name
        self.home: dict[int, tuple[int, ...]] = {}  # the layout a tensor was produced in
        self._used: set[str] = set()
        self._params: dict[tuple, tuple[str, str]] = {}
        self.op: Operator | None = None  # the op being translated, for messages
        self.pinned: set[int] = set()  # tensors whose layout a TRANSPOSE chose
        self.folded_bytes = 0  # what fold.py has folded so far, held to the expansion limit
        source = Path(model.path)
        self.file_bytes = source.stat().st_size if source.is_file() else 0

    # --- names and nodes ------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        return fresh_name(self._used, base or "v")

    def node(self, op_type: str, inputs: list[str], hint: str, domain: str = "",
             outputs: int = 1, **attrs) -> str | list[str]:
        outs = [self.fresh(hint if outputs == 1 else f"{hint}_{i}") for i in range(outputs)]
        where = f"op{self.op.index}" if self.op is not None else "io"
        self.nodes.append(
            helper.make_node(op_type, inputs, outs, name=self.fresh(f"{where}_{op_type}"),
                             domain=domain, **attrs)
        )
        return outs[0] if outputs == 1 else outs

    def initializer(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def ints(self, values, hint: str) -> str:
        return self.initializer(np.asarray(values, dtype=np.int64), hint)

    # --- tensors ---------------------------------------------------------------------------
    def tensor(self, index: int) -> Tensor:
        return self.model.tensors[index]

    def const(self, index: int) -> np.ndarray | None:
        return None if index < 0 else self.consts.get(index)

    def need_const(self, index: int, what: str) -> np.ndarray:
        value = self.const(index)
        if value is None:
            self.fail(f"its {what} (tensor {index}) must be a constant")
        return value

    def quant(self, index: int) -> TensorQuant | None:
        """Quantization of an int8/uint8 tensor (None for float and plain integer tensors)."""
        t = self.tensor(index)
        return t.quant if t.quant is not None and t.dtype in QUANT_TYPES else None

    def layout(self, index: int) -> tuple[int, ...]:
        return self.home.get(index, L.identity(len(self.tensor(index).shape)))

    def prefer(self, index: int) -> tuple[int, ...]:
        """The layout a layout-indifferent op reads ``index`` in: its own, except that a rank-4
        tensor in TFLite's NHWC (a graph input, a RESHAPE output) goes to NCHW at once, so the
        Transpose sits at the boundary rather than after a Pad or a Quantize. A layout a TRANSPOSE
        chose is kept."""
        lay = self.layout(index)
        if len(lay) == 4 and lay == L.identity(4) and index not in self.pinned:
            return L.NCHW
        return lay

    def shape(self, index: int) -> tuple[int, ...]:
        return self.tensor(index).shape

    def fail(self, message: str) -> None:
        op = self.op
        where = f"operator {op.index} ({op.opcode})" if op is not None else "graph"
        raise OpfuseError(f"{self.model.path}: {where}: {message}")

    def quant_axis(self, index: int, q: TensorQuant) -> int | None:
        """The TFLite axis of a per-channel tensor. Some converters write a wrong
        quantized_dimension (person_detect's rank-1 biases say 3): the axis whose size matches
        the number of scales wins."""
        if q.scale.size == 1:
            return None
        shape = self.shape(index)
        if 0 <= q.dim < len(shape) and shape[q.dim] == q.scale.size:
            return q.dim
        fits = [a for a, d in enumerate(shape) if d == q.scale.size]
        if len(fits) != 1:
            self.fail(f"tensor {index} has {q.scale.size} scales and shape {list(shape)}")
        return fits[0]

    def _qparams(self, index: int, axis_map: tuple[int, ...] | None) -> tuple[str, str, int | None]:
        q = self.quant(index) or self.tensor(index).quant
        axis = self.quant_axis(index, q)
        ir_axis = axis if axis is None or axis_map is None else axis_map.index(axis)
        key = (index, ir_axis)
        if key not in self._params:
            t = self.tensor(index)
            zdtype = t.dtype if t.dtype in QUANT_TYPES else np.dtype(np.int32)
            scale = q.scale.astype(np.float32)
            zero = q.zero_point.astype(zdtype)
            if axis is None:
                scale, zero = scale.reshape(()), zero[:1].reshape(())
            self._params[key] = (
                self.initializer(scale, f"{t.name}_scale"),
                self.initializer(zero, f"{t.name}_zero_point"),
            )
        s, z = self._params[key]
        return s, z, ir_axis

    def dequantize(self, name: str, index: int, axis_map: tuple[int, ...] | None = None) -> str:
        s, z, axis = self._qparams(index, axis_map)
        extra = {} if axis is None else {"axis": axis}
        return self.node("DequantizeLinear", [name, s, z], f"{self.tensor(index).name}_dq", **extra)

    def quantize(self, name: str, index: int, hint: str) -> str:
        s, z, _ = self._qparams(index, None)
        return self.node("QuantizeLinear", [name, s, z], hint)

    # --- reading and writing TFLite tensors ------------------------------------------------
    def value(self, index: int, layout: tuple[int, ...] | None = None) -> str:
        """The IR value of tensor ``index`` (its stored dtype) in ``layout`` (default: its own)."""
        if index in self.consts and index not in self.forms:
            return self._const_value(index, layout)
        forms = self.forms.get(index)
        if not forms:
            self.fail(f"reads tensor {index} '{self.tensor(index).name}', which nothing produces")
        home = self.home[index]
        layout = home if layout is None else tuple(layout)
        if layout not in forms:
            forms[layout] = self._relayout(index, forms[home], home, layout)
        return forms[layout]

    def _const_value(self, index: int, layout) -> str:
        data = self.consts[index]
        perm = L.identity(data.ndim) if layout is None else tuple(layout)
        return self.initializer(np.ascontiguousarray(data.transpose(perm)), self.tensor(index).name)

    def _relayout(self, index: int, name: str, src, dst) -> str:
        """``DQ -> Transpose -> Q`` (or a Reshape when only unit axes move)."""
        t = self.tensor(index)
        ir_shape = L.permute(t.shape, src)
        perm = L.between(src, dst)
        hint = f"{t.name}_{''.join(map(str, dst))}"
        q = self.quant(index)
        x = self.dequantize(name, index) if q is not None else name
        if L.moves_only_unit_axes(ir_shape, perm):
            y = self.node("Reshape", [x, self.ints(L.permute(t.shape, dst), f"{hint}_shape")],
                          f"{hint}_f" if q is not None else hint)
        else:
            y = self.node("Transpose", [x], f"{hint}_f" if q is not None else hint, perm=list(perm))
        return self.quantize(y, index, hint) if q is not None else y

    def read(self, index: int, layout: tuple[int, ...] | None = None) -> str:
        """Tensor ``index`` as a float value in ``layout``: through its own DQ when quantized."""
        name = self.value(index, layout)
        if self.quant(index) is None:
            if self.tensor(index).dtype == np.float16:
                return self.node("Cast", [name], f"{self.tensor(index).name}_f32", to=1)
            return name
        return self.dequantize(name, index)

    def weight(self, index: int, perm: tuple[int, ...] | None = None) -> str:
        """A constant weight or bias, permuted, as a float value (int8/int32 initializer + DQ)."""
        data = self.need_const(index, "weight")
        perm = L.identity(data.ndim) if perm is None else perm
        name = self.initializer(np.ascontiguousarray(data.transpose(perm)), self.tensor(index).name)
        if self.tensor(index).quant is not None and data.dtype.kind in "iu":
            return self.dequantize(name, index, perm)
        if data.dtype != np.float32:
            return self.node("Cast", [name], f"{self.tensor(index).name}_f32", to=1)
        return name

    def write(self, index: int, name: str, layout: tuple[int, ...] | None = None) -> None:
        """Tensor ``index`` is the float value ``name`` in ``layout``: quantize it if it is int8."""
        t = self.tensor(index)
        layout = L.identity(len(t.shape)) if layout is None else tuple(layout)
        if self.quant(index) is not None:
            name = self.quantize(name, index, t.name)
        self.forms[index] = {layout: name}
        self.home[index] = layout

    def alias(self, index: int, name: str, layout: tuple[int, ...]) -> None:
        """Tensor ``index`` is already ``name`` (its stored dtype) in ``layout``: no node."""
        self.forms[index] = {tuple(layout): name}
        self.home[index] = tuple(layout)

    def value_info_for(self, name: str, index: int, layout: tuple[int, ...] | None = None) -> None:
        t = self.tensor(index)
        shape = t.shape if layout is None else L.permute(t.shape, layout)
        elem = helper.np_dtype_to_tensor_dtype(t.dtype)
        self.value_info.append(helper.make_tensor_value_info(name, elem, list(shape)))

    def reshaped(self, index: int, shape: tuple[int, ...]) -> str:
        """Tensor ``index`` (TFLite element order) reshaped to ``shape``, as a float value; for a
        quantized tensor the Reshape is a ``DQ -> Reshape -> Q`` group of its own."""
        t = self.tensor(index)
        hint = f"{t.name}_flat"
        x = self.read(index, L.identity(len(t.shape)))
        y = self.node("Reshape", [x, self.ints(shape, f"{hint}_shape")],
                      f"{hint}_f" if self.quant(index) is not None else hint)
        if self.quant(index) is None:
            return y
        return self.dequantize(self.quantize(y, index, hint), index)

    def write_reshaped(self, index: int, name: str, shape: tuple[int, ...]) -> None:
        """Write float ``name`` (of ``shape``) to tensor ``index`` of another shape, the Reshape a
        group of its own when ``index`` is quantized."""
        t = self.tensor(index)
        if self.quant(index) is not None:
            name = self.dequantize(self.quantize(name, index, f"{t.name}_rows"), index)
        y = self.node("Reshape", [name, self.ints(t.shape, f"{t.name}_shape")],
                      f"{t.name}_f" if self.quant(index) is not None else t.name)
        self.write(index, y)
