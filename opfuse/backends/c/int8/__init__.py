"""int8 kernels of the C backend: siblings of the float templates, chosen by the kernel registry
(``kernels.REGISTRY``, keyed by op and dtype). TFLite's reference semantics for ``tflite``
rounding, QDQ's for ``onnx`` (docs/architecture.md, "int8 in the IR")."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from opfuse.backends.c import layout
from opfuse.backends.c.cgen import CWriter, attr, who
from opfuse.backends.c.ctype import BOOL, ctype_of
from opfuse.backends.c.int8.chain import CHAIN_OPS, emit_elementwise8
from opfuse.backends.c.int8.conv import emit_conv8, emit_gemm8
from opfuse.backends.c.int8.convt8 import emit_convt8
from opfuse.backends.c.int8.lstm import emit_lstm8
from opfuse.backends.c.int8.move import (
    emit_concat8,
    emit_dequantize,
    emit_quantize,
    emit_resize_bilinear8,
)
from opfuse.backends.c.int8.pools import emit_pool8, emit_reduce_mean8
from opfuse.backends.c.int8.softmax import emit_softmax8
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ops import groups
from opfuse.quant import get_quant

Emitter = Callable[[CWriter, list[ir.Node], Params, int], None]


def _anchor(fn):
    def emit(w: CWriter, members: list[ir.Node], params: Params, opset: int) -> None:
        head, rest = members[0], members[1:]
        for n in rest:
            if n.op_type not in CHAIN_OPS:
                raise OpfuseError(f"C backend: {who(n)}: an int8 {head.op_type} kernel takes only "
                                  "elementwise ops after it")
        fn(w, head, rest, params)
    return emit


def _single(fn):
    def emit(w: CWriter, members: list[ir.Node], params: Params, opset: int) -> None:
        if len(members) != 1:
            raise OpfuseError(f"C backend: {who(members[0])}: a fused int8 kernel cannot start "
                              f"with {members[0].op_type}")
        fn(w, members[0], params)
    return emit


def _resize(w: CWriter, node: ir.Node, params: Params) -> None:
    mode = attr(node, "mode", "nearest")
    if mode == "linear":
        emit_resize_bilinear8(w, node, params)
    elif mode == "nearest":
        layout.emit_resize(w, node, params)
    else:
        raise OpfuseError(f"C backend: {who(node)}: an int8 Resize in mode '{mode}' is not emitted")


def _softmax(w, members, params, opset) -> None:
    if len(members) != 1:
        raise OpfuseError(f"C backend: {who(members[0])}: a fused int8 Softmax is not emitted")
    emit_softmax8(w, members[0], params, opset)


def _pool(w, members, params, opset) -> None:
    emit_pool8(w, members, params)


def _mean(w, members, params, opset) -> None:
    emit_reduce_mean8(w, members, params)


def _elementwise(w, members, params, opset) -> None:
    emit_elementwise8(w, members, params)


INT8_KERNELS: dict[str, Emitter] = {
    "Conv": _anchor(emit_conv8),
    "ConvTranspose": _anchor(emit_convt8),
    "Gemm": _anchor(emit_gemm8),
    "MatMul": _anchor(emit_gemm8),
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _pool,
    "ReduceMean": _mean,
    "Softmax": _softmax,
    "QuantizeLinear": _single(emit_quantize),
    "DequantizeLinear": _single(emit_dequantize),
    "Concat": _single(emit_concat8),
    "Transpose": _single(layout.emit_transpose),
    "Slice": _single(layout.emit_slice),
    "Split": _single(layout.emit_split),
    "Expand": _single(layout.emit_expand),
    "Pad": _single(layout.emit_pad),
    "Resize": _single(_resize),
    "LSTM": _single(emit_lstm8),
    **{op: _single(layout.emit_view) for op in layout.VIEW_OPS},
    **{op: _elementwise for op in CHAIN_OPS},
}


def is_int8_kernel(members: list[ir.Node]) -> bool:
    """Whether a kernel computes on quantized integers: its head reads or writes a quantized
    (or 8-bit) activation."""
    head = members[0]
    if head.op_type in groups.CONVERSIONS:
        return True
    for v in (*head.inputs[:1], *head.outputs[:1]):
        if v is not None and (get_quant(v) is not None
                              or (ctype_of(v) is not None and ctype_of(v).size == 1
                                  and not ctype_of(v).is_float and ctype_of(v) is not BOOL)):
            return True
    return False
