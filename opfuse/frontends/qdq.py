"""Fold QDQ groups into quantized nodes (docs/architecture.md, "int8 in the IR").

``DequantizeLinear -> float op -> QuantizeLinear`` becomes the float op itself reading and writing
int8/uint8 values; weights become int8 initializers, the bias an int32 initializer; every such
value carries its :class:`~opfuse.quant.QuantParams` in ``value.meta[QUANT]``:

    DQ(x, sx) -> op -> Q(sy)             op(x_q) -> y_q          x_q ~ sx, y_q ~ sy
    op -> Relu|Clip -> Q(sy)             op -> y_q -> clamp -> y_q'  both with sy (the clamp is
                                          then the requantization clamp: exact in the int domain)
    op1 -> Q(s) -> DQ(s) -> op2          one int8 value between op1 and op2
    DQ(s1) -> op, x annotated s2 != s1   a requantize: DQ -> QuantizeLinear(s1) kept before op
    ops that only move int8 data         (QOperator's int8 Reshape, MaxPool...) pass params through

QuantizeLinear / DequantizeLinear nodes stay where they really convert: a float graph input into
int8, int8 into a float graph output, and requantization between different parameters. The fold
sets dtypes itself: the folded graph is no longer valid ONNX (Conv on int8), so no onnx shape
inference may run on it afterwards.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxscript.optimizer

from opfuse.frontends.qdq_constants import fold_wide_constant_dequantize
from opfuse.frontends.qdq_params import DQ, fresh_initializer_name, node_params
from opfuse.ir.values import const
from opfuse.ops import groups
from opfuse.quant import (
    LSTM_CELL_SCALE,
    ONNX,
    QUANT,
    ROUNDING,
    QuantParams,
    get_quant,
    set_quant,
)

Q = "QuantizeLinear"
CLAMPS = groups.CLAMPS
QUANTIZABLE = groups.QUANTIZABLE  # read as one int8 op between Q/DQ pairs (the op registry's)
# Ops that only move or select int8 values: an int8 input passes its params to the output.
PASS_THROUGH = groups.QUANT_PASS
# Float inputs that are parameters, not data: quantized with the data's params (Clip bounds, Pad
# value) or kept float (Resize's roi and scales).
QUANTIZED_PARAMS = {"Clip": (1, 2), "Pad": (2,)}
FLOAT_PARAMS = {"Resize": (1, 2)}
FLOAT_SUFFIX = "_qop_float"  # names the QOperator rewrite gives its float temporaries
FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)
_RANGES = {
    ir.DataType.INT8: (-128, 127),
    ir.DataType.UINT8: (0, 255),
    ir.DataType.INT16: (-(2**15), 2**15 - 1),
    ir.DataType.UINT16: (0, 2**16 - 1),
    ir.DataType.INT32: (-(2**31), 2**31 - 1),
}


def fold_qdq(model: ir.Model) -> int:
    """Fold every QDQ group of ``model`` in place; return the number of ops now quantized.

    Sets ``model.meta[ROUNDING]`` from the proto's ``metadata_props`` (default ``"onnx"``)."""
    graph = model.graph
    if not any(n.op_type in (Q, DQ) and n.domain in ("", "ai.onnx") for n in graph):
        return 0  # a float model: no rounding mode (is_quantized reads its presence)
    model.meta[ROUNDING] = model.metadata_props.get(ROUNDING, ONNX)
    _annotate_boundaries(graph)
    folded = 0
    done: set[int] = set()
    for node in list(graph):
        if id(node) in done or node.graph is None or node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in QUANTIZABLE and not _float_lstm(node):
            chain = _foldable(node)
            if chain is not None:
                _fold(graph, node, chain)
                done.update(id(c) for c in chain)
                folded += 1 + len(chain)
                continue
        if node.op_type in PASS_THROUGH:
            _pass_through(node)
    _drop_noop_requantize(graph)
    fold_wide_constant_dequantize(graph)
    onnxscript.optimizer.remove_unused_nodes(model)
    return folded


def _float_lstm(node: ir.Node) -> bool:
    """An LSTM is read as one int8 op only as TFLite's int8 LSTM, whose cell state scale the
    TFLite frontend puts on it; between other Q/DQ pairs it stays a float LSTM (float C)."""
    return node.op_type == "LSTM" and LSTM_CELL_SCALE not in node.metadata_props


def _is(node: ir.Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx")


def _annotate_boundaries(graph: ir.Graph) -> None:
    """Every Q output takes its params; every DQ input without any takes the DQ's (graph inputs,
    weights). A weight read by DQs of different params is split later, per consumer."""
    for node in graph:
        if _is(node, Q) or _is(node, DQ):
            found = node_params(node)
            if found is None:
                continue
            target = node.outputs[0] if node.op_type == Q else node.inputs[0]
            if get_quant(target) is None:
                set_quant(target, found[0])


def _data_inputs(node: ir.Node) -> list[int]:
    skip = set(QUANTIZED_PARAMS.get(node.op_type, ())) | set(FLOAT_PARAMS.get(node.op_type, ()))
    return [
        i
        for i, v in enumerate(node.inputs)
        if v is not None and i not in skip and v.dtype in FLOATS
    ]


def _quant_readers(value: ir.Value) -> list[ir.Node] | None:
    """The QuantizeLinear nodes reading ``value``, or None unless every reader is one."""
    if value.is_graph_output():
        return None
    readers = value.consumers()
    if not readers or any(
        not _is(r, Q) or r.inputs[0] is not value or node_params(r) is None for r in readers
    ):
        return None
    return list(readers)


def _foldable(node: ir.Node) -> list[ir.Node] | None:
    """The clamp chain folded with ``node`` ([] or [Relu/Clip]) when ``node`` is a QDQ group."""
    for i in _data_inputs(node):
        producer = node.inputs[i].producer()
        if not _is(producer, DQ) or node_params(producer) is None:
            return None
    for i in QUANTIZED_PARAMS.get(node.op_type, ()):
        if i < len(node.inputs) and node.inputs[i] is not None and const(node.inputs[i]) is None:
            return None
    if not _data_inputs(node):
        return None
    outs = [o for o in node.outputs if o.uses() or o.is_graph_output()]
    if len(outs) != 1 or outs[0] is not node.outputs[0] or outs[0].dtype not in FLOATS:
        return None
    out = outs[0]
    if _quant_readers(out) is not None:
        return []
    readers = out.consumers()
    if node.op_type in CLAMPS or out.is_graph_output() or len(readers) != 1:
        return None
    clamp = readers[0]
    if not (_is(clamp, "Relu") or _is(clamp, "Clip")) or clamp.inputs[0] is not out:
        return None
    if any(const(v) is None for v in clamp.inputs[1:] if v is not None):
        return None
    if _quant_readers(clamp.outputs[0]) is None:
        return None
    return [clamp]


def quantize_array(real: np.ndarray, params: QuantParams, dtype: ir.DataType) -> np.ndarray:
    """ONNX QuantizeLinear of a per-tensor value: round half to even, saturate."""
    lo, hi = _RANGES[dtype]
    q = np.rint(np.asarray(real, np.float64) / float(params.scale[0])) + int(params.zero_point[0])
    return np.clip(q, lo, hi).astype(dtype.numpy())


def _fold(graph: ir.Graph, node: ir.Node, chain: list[ir.Node]) -> None:
    for i in _data_inputs(node):
        node.replace_input_with(i, _int_input(graph, node, node.inputs[i].producer()))
    last = chain[-1] if chain else node
    readers = _quant_readers(last.outputs[0])
    assert readers is not None
    params, dtype = node_params(readers[0])  # type: ignore[misc]
    for member in [node, *chain]:
        out = member.outputs[0]
        out.dtype = dtype
        set_quant(out, params)
    for member in [node, *chain]:
        for i in QUANTIZED_PARAMS.get(member.op_type, ()):
            _quantize_param(graph, member, i, params, dtype)
    if node.op_type == "Pad" and (len(node.inputs) < 3 or node.inputs[2] is None):
        # the float Pad fills real 0, which is the zero point in the integer domain
        _quantize_param(graph, node, 2, params, dtype, default=0.0)
    result = last.outputs[0]
    if result.name and result.name.endswith(FLOAT_SUFFIX) and not readers[0].outputs[0].is_graph_output():
        name = readers[0].outputs[0].name  # the QOperator rewrite's float temporary: take the int8 name
        readers[0].outputs[0].name = None
        result.name = name
    for reader in readers:
        q_out = reader.outputs[0]
        if node_params(reader) == (params, dtype):
            _replace(q_out, result)
            graph.remove(reader, safe=True)
        else:  # another consumer wants other params: requantize from the int8 result
            deq = _dequantize(graph, result, reader)
            reader.replace_input_with(0, deq)


def _replace(old: ir.Value, new: ir.Value) -> None:
    """Uses of ``old`` read ``new``; a graph output keeps its name."""
    output = old.is_graph_output()
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if output:
        name = old.name
        old.name = None
        new.name = name


def _int_input(graph: ir.Graph, node: ir.Node, dq: ir.Node) -> ir.Value:
    """The int8 value ``node`` reads in place of ``dq``'s float output."""
    params, dtype = node_params(dq)  # type: ignore[misc]
    x = dq.inputs[0]
    if get_quant(x) == params:
        return x
    if x.is_initializer() or x.const_value is not None:
        copy = ir.Value(
            name=fresh_initializer_name(graph, f"{x.name}_q"), shape=x.shape, type=x.type, const_value=x.const_value
        )
        graph.register_initializer(copy)
        set_quant(copy, params)
        return copy
    # an activation with other params: requantize it (DQ stays, a Q follows it)
    return _requantize(graph, dq, params, dtype)


def _requantize(graph: ir.Graph, dq: ir.Node, params: QuantParams, dtype: ir.DataType) -> ir.Value:
    scale, zp = dq.inputs[1], dq.inputs[2] if len(dq.inputs) > 2 else None
    if zp is None:
        zp = _initializer(graph, f"{dq.name}_zp", np.zeros((), dtype.numpy()))
    node = ir.Node("", Q, [dq.outputs[0], scale, zp], name=f"{dq.name}_requantize")
    graph.insert_after(dq, node)
    out = node.outputs[0]
    out.name = _fresh_value(graph, f"{dq.outputs[0].name}_q")
    out.dtype, out.shape = dtype, dq.outputs[0].shape
    set_quant(out, params)
    return out


def _dequantize(graph: ir.Graph, value: ir.Value, before: ir.Node) -> ir.Value:
    params = get_quant(value)
    assert params is not None
    scale = _initializer(graph, f"{value.name}_scale", params.scale.reshape(()))
    zp = _initializer(graph, f"{value.name}_zero_point", params.zero_point.reshape(()).astype(value.dtype.numpy()))
    node = ir.Node("", DQ, [value, scale, zp], name=f"{value.name}_dequantize")
    graph.insert_before(before, node)
    out = node.outputs[0]
    out.name = _fresh_value(graph, f"{value.name}_dq")
    out.dtype, out.shape = ir.DataType.FLOAT, value.shape
    return out


def _quantize_param(
    graph: ir.Graph,
    node: ir.Node,
    index: int,
    params: QuantParams,
    dtype: ir.DataType,
    default: float | None = None,
) -> None:
    value = node.inputs[index] if index < len(node.inputs) else None
    real = const(value) if value is not None else default
    if real is None:
        return
    q = quantize_array(np.asarray(real), params, dtype)
    new = _initializer(graph, f"{node.name}_{index}_q", q)
    set_quant(new, params)
    if index < len(node.inputs):
        node.replace_input_with(index, new)
    else:
        node.resize_inputs(index + 1)  # type: ignore[attr-defined]
        node.replace_input_with(index, new)


def _initializer(graph: ir.Graph, base: str, array: np.ndarray) -> ir.Value:
    tensor = ir.tensor(np.asarray(array))
    value = ir.Value(name=fresh_initializer_name(graph, base), shape=tensor.shape, type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value


def _fresh_value(graph: ir.Graph, base: str) -> str:
    taken = {v.name for n in graph for v in n.outputs} | {v.name for v in graph.inputs}
    taken |= set(graph.initializers)
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


def _pass_through(node: ir.Node) -> None:
    """An op moving int8 data (QOperator form): its output has its input's params."""
    x = node.inputs[0] if node.inputs else None
    params = get_quant(x)
    if params is None or x.dtype in FLOATS:
        return
    for out in node.outputs:
        if out.dtype == x.dtype and get_quant(out) is None:
            set_quant(out, params)


def _drop_noop_requantize(graph: ir.Graph) -> None:
    """``DQ(s) -> Q(s)`` of an int8 value is that value: forward it."""
    for node in list(graph):
        if not _is(node, Q) or not _is(node.inputs[0].producer(), DQ):
            continue
        dq = node.inputs[0].producer()
        x, out = dq.inputs[0], node.outputs[0]
        found = node_params(node)
        if found is None or get_quant(x) != found[0] or x.dtype != found[1]:
            continue
        if out.is_graph_output() and (x.is_graph_input() or x.is_initializer() or x.is_graph_output()):
            continue
        _replace(out, x)
        graph.remove(node, safe=True)


__all__ = ["PASS_THROUGH", "QUANT", "QUANTIZABLE", "fold_qdq", "node_params", "quantize_array"]
