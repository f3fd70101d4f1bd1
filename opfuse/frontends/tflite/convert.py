"""TFLite model -> ONNX ModelProto in QDQ form, NCHW inside (docs/architecture.md, "int8 in the IR"
and "Layout of TFLite models").

Graph inputs and outputs keep the TFLite tensor's name, NHWC shape and stored dtype (int8 for a
quantized model), so the IR's inputs are exactly what the TFLite interpreter takes; conv-like ops
read them through one Transpose each, which is the boundary.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from opfuse.errors import OpfuseError
from opfuse.frontends.tflite import layout as L
from opfuse.frontends.tflite.declared import check_declared_shapes
from opfuse.frontends.tflite.fold import try_fold
from opfuse.frontends.tflite.graph import QUANT_TYPES, Graph
from opfuse.frontends.tflite.mapping import IMPORTERS
from opfuse.frontends.tflite.ops_shape import CUSTOM_DOMAIN
from opfuse.frontends.tflite.reader import TfliteModel
from opfuse.quant import ROUNDING, TFLITE

OPSET = 17
# What numpy and the importers raise on an op whose shapes, constants and options disagree
IMPORT_ERRORS = (AttributeError, IndexError, ValueError, KeyError, TypeError, ZeroDivisionError,
                 OverflowError, MemoryError)


def is_quantized(model: TfliteModel) -> bool:
    """Any activation stored as int8/uint8 with a scale: TFLite Micro is its reference."""
    return any(t.data is None and t.quant is not None and t.dtype in QUANT_TYPES
               for t in model.tensors)


def _refuse_int16(model: TfliteModel) -> None:
    """int16 activations are refused, but an int8 LSTM's int16 cell state (input 19 of
    UNIDIRECTIONAL_SEQUENCE_LSTM, a state inside the op: ops_lstm.py)."""
    cells = {op.inputs[19] for op in model.operators
             if op.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM" and len(op.inputs) > 19}
    for t in model.tensors:
        if t.data is None and t.dtype == np.int16 and t.quant is not None \
                and t.index not in cells:
            raise OpfuseError(
                f"{model.path}: tensor {t.index} '{t.name}' is an int16 activation "
                "(16x8 quantization), which opfuse does not support; use an int8 model"
            )


def to_onnx(model: TfliteModel) -> onnx.ModelProto:
    _refuse_int16(model)
    g = Graph(model)
    inputs = []
    for index in model.inputs:
        t = g.tensor(index)
        name = g.fresh(t.name)
        inputs.append(_info(name, t.dtype, t.shape))
        g.alias(index, name, L.identity(len(t.shape)))
    for op in model.operators:
        g.op = op
        try:
            if try_fold(g, op):
                continue
            importer = IMPORTERS.get(op.opcode)
            if importer is None:
                raise OpfuseError(
                    f"{model.path}: operator {op.index} ({op.opcode}) has no importer in opfuse"
                )
            importer(g, op)
        except OpfuseError:
            raise
        except IMPORT_ERRORS as exc:  # an op whose tensors or options contradict each other
            raise OpfuseError(
                f"{model.path}: operator {op.index} ({op.opcode}): cannot import it "
                f"({type(exc).__name__}: {exc})"
            ) from None
    g.op = None
    taken: set[str] = set()
    try:
        outputs = [_output(g, index, taken) for index in model.outputs]
    except IMPORT_ERRORS as exc:
        raise OpfuseError(f"{model.path}: graph outputs: cannot import them "
                          f"({type(exc).__name__}: {exc})") from None
    graph = helper.make_graph(g.nodes, "tflite", inputs, outputs, g.initializers,
                              value_info=g.value_info)
    opsets = [helper.make_opsetid("", OPSET)]
    if any(n.domain == CUSTOM_DOMAIN for n in g.nodes):
        opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="opfuse-tflite",
                              ir_version=8)
    if is_quantized(model):
        helper.set_model_props(proto, {ROUNDING: TFLITE})
    check_declared_shapes(g, proto)
    return proto


def _info(name: str, dtype: np.dtype, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), list(shape))


def _output(g: Graph, index: int, taken: set[str]) -> onnx.ValueInfoProto:
    """The output in TFLite's layout and dtype, under the tensor's name."""
    t = g.tensor(index)
    value = g.value(index, L.identity(len(t.shape)))
    graph_inputs = {g.forms[i][L.identity(len(g.shape(i)))] for i in g.model.inputs}
    produced = {o for n in g.nodes for o in n.output}
    if value in graph_inputs or value not in produced or value in taken:
        want = g.fresh(t.name)  # an input, constant or repeated output passes through Identity
        g.nodes.append(helper.make_node("Identity", [value], [want], name=g.fresh("out_Identity")))
    else:
        want = t.name if t.name in produced or t.name not in g._used else g.fresh(t.name)
        if value != want:
            if want in produced:  # the tensor's name went to its NCHW form: give that another
                _rename(g, want, g.fresh(f"{want}_nchw"))
            _rename(g, value, want)
    taken.add(want)
    return _info(want, t.dtype, t.shape)


def _rename(g: Graph, old: str, new: str) -> None:
    g._used.add(new)
    for node in g.nodes:
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
    for forms in g.forms.values():
        for key, name in forms.items():
            if name == old:
                forms[key] = new
