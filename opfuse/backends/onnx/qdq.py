"""Expand a quantized IR back into QDQ ONNX that onnxruntime runs (docs/architecture.md, "int8 in the IR").

The IR holds int8 values with ``QuantParams`` on them and float op types (Conv on int8). In the
emitted file every op that is not itself a QuantizeLinear/DequantizeLinear computes in float again:

    int8 weight W (params p)          W stays an int8 initializer; the op reads DQ(W, p)
    int8 activation x read by an op   the op reads DQ(x, p_x)
    op writing int8 y (params p_y)    the op writes float y_f, then y = Q(y_f, p_y)
    op -> clamp on the same params    op writes float into the clamp, one Q after the clamp
                                      (the form onnxruntime fuses into QLinearConv and friends)

Kept QuantizeLinear/DequantizeLinear nodes of the IR read and write the int8 values directly.
Every inserted node belongs to the kernel of the op it serves, so the kernel metadata still covers
the whole graph.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from opfuse.fresh_names import fresh_name
from opfuse.ops import groups
from opfuse.quant import QuantParams, get_quant

CONVERSIONS = groups.CONVERSIONS
CLAMPS = groups.CLAMPS


def quant_map(model: ir.Model) -> dict[str, tuple[QuantParams, int]]:
    """Value name -> (params, ONNX element type) for every annotated value of ``model``."""
    found: dict[str, tuple[QuantParams, int]] = {}
    graph = model.graph
    values = [*graph.inputs, *graph.initializers.values()]
    values += [v for node in graph for v in node.outputs]
    for value in values:
        params = get_quant(value)
        if params is not None and value.name and value.dtype is not None:
            found[value.name] = (params, int(value.dtype))
    return found


def _computes_float(node: onnx.NodeProto) -> bool:
    return not (node.op_type in CONVERSIONS and node.domain in ("", "ai.onnx"))


def expand_qdq(
    graph: onnx.GraphProto, annotated: dict[str, tuple[QuantParams, int]], kernel_of: dict[str, int]
) -> None:
    """Rewrite ``graph`` in place into QDQ form; ``kernel_of`` gains the inserted nodes."""
    quant = {name: p for name, (p, _) in annotated.items()}
    dtypes = {name: t for name, (_, t) in annotated.items()}
    taken = _names(graph)
    producer = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            if name:
                readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    new_inits: list[onnx.TensorProto] = []
    head: list[onnx.NodeProto] = []  # DQ of initializers and graph inputs, first in the graph
    after: dict[str, list[onnx.NodeProto]] = {}  # node name -> nodes inserted right after it

    def fresh(base: str) -> str:
        return fresh_name(taken, base)

    def params_inputs(name: str) -> list[str]:
        p = quant[name]
        scale = p.scale.astype(np.float32)
        zp = p.zero_point.astype(onnx.helper.tensor_dtype_to_np_dtype(dtypes[name]))
        if not p.per_channel:
            scale, zp = scale.reshape(()), zp.reshape(())
        s_name, z_name = fresh(f"{name}_scale"), fresh(f"{name}_zero_point")
        new_inits.append(onnx.numpy_helper.from_array(scale, s_name))
        new_inits.append(onnx.numpy_helper.from_array(zp, z_name))
        return [s_name, z_name]

    def axis_attr(name: str) -> dict:
        p = quant[name]
        return {"axis": int(p.axis)} if p.per_channel else {}

    def skip_qdq(name: str) -> bool:
        """op -> clamp on the same params: the op writes float straight into the clamp."""
        node = producer.get(name)
        users = readers.get(name, [])
        return (
            node is not None
            and _computes_float(node)
            and name not in outputs
            and bool(users)
            and all(
                u.op_type in CLAMPS and u.input[0] == name and quant.get(u.output[0]) == quant[name]
                for u in users
            )
        )

    for name in list(quant):
        float_users = [u for u in readers.get(name, []) if _computes_float(u)]
        node = producer.get(name)
        if skip_qdq(name):
            continue  # keeps its name, now a float value
        float_name = fresh(f"{name}_dq")
        if node is not None and _computes_float(node):
            # the op writes float; a QuantizeLinear makes the int8 value
            raw = fresh(f"{name}_float")
            node.output[list(node.output).index(name)] = raw
            q = onnx.helper.make_node(
                "QuantizeLinear", [raw, *params_inputs(name)], [name], name=fresh(f"{name}_quantize"),
                **axis_attr(name),
            )
            after.setdefault(node.name, []).append(q)
            kernel_of[q.name] = kernel_of[node.name]
        if not float_users:
            continue
        dq = onnx.helper.make_node(
            "DequantizeLinear", [name, *params_inputs(name)], [float_name],
            name=fresh(f"{name}_dequantize"), **axis_attr(name),
        )
        if node is None:
            head.append(dq)
            kernel_of[dq.name] = kernel_of[float_users[0].name]
        else:
            after.setdefault(node.name, []).append(dq)
            kernel_of[dq.name] = kernel_of[node.name]
        for user in float_users:
            for i, inp in enumerate(user.input):
                if inp == name:
                    user.input[i] = float_name
    ordered = list(head)
    for node in graph.node:
        ordered.append(node)
        ordered.extend(after.get(node.name, ()))
    del graph.node[:]
    graph.node.extend(ordered)
    graph.initializer.extend(new_inits)
    kept = [vi for vi in graph.value_info if vi.name not in quant]
    del graph.value_info[:]
    graph.value_info.extend(kept)


def _names(graph: onnx.GraphProto) -> set[str]:
    names = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    for node in graph.node:
        names.add(node.name)
        names.update(node.output)
    return names
