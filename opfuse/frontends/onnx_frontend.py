"""ONNX import: parse, check, sort, upgrade, bind dims, fold weight-building constants, infer shapes.

The result is the model "as imported": every node its own kernel-to-be, every value a static shape and
dtype, every node a unique name. No optimization happens here beyond folding subgraphs that only build
constants (ConstantOfShape fills, Constant nodes, shape arithmetic), which no runtime executes either.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxscript.optimizer
from google.protobuf.message import DecodeError
from onnx_ir.passes.common import (
    LiftConstantsToInitializersPass,
    NameFixPass,
    RemoveInitializersFromInputsPass,
)

from opfuse.errors import OpfuseError
from opfuse.frontends.graph_order import sort_or_raise
from opfuse.frontends.if_fold import fold_constant_ifs, opaque_if_shapes
from opfuse.frontends.input_values import bind_input_values
from opfuse.frontends.large_proto import INFERENCE_ERRORS, infer_shapes
from opfuse.frontends.limits import refuse
from opfuse.frontends.pool_ceil import trim_end_pads
from opfuse.frontends.proto_check import check_proto
from opfuse.frontends.qdq import fold_qdq
from opfuse.frontends.qoperator import has_qoperators, qoperator_to_qdq
from opfuse.frontends.size_check import FoldGuard, check_sizes, value_shapes
from opfuse.frontends.static_shapes import settle_shapes
from opfuse.frontends.value_info import (
    bind_value_shapes,
    clear_nonpositive_dims,
    without_inferable_annotations,
)
from opfuse.frontends.window_check import check_windows
from opfuse.ir import require_static, verify
from opfuse.ops import groups

MIN_IR_VERSION = 8  # initializers need not be graph inputs from IR 4 on; ORT 1.32 reads 8 to 11
MIN_OPSET = 14  # HardSwish (opset 14) is what hard-swish patterns are rewritten into
_FOLD_LIMIT = 1 << 40  # weights built by ConstantOfShape can be large; always fold them


def parse_input_shapes(specs: list[str] | tuple[str, ...] | None) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=1x3x224x224`` items (the CLI's --input-shape)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        name, sep, dims = spec.rpartition("=")
        try:
            parsed = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            parsed = ()
        if not sep or not name or not parsed or any(d <= 0 for d in parsed):
            raise OpfuseError(f"--input-shape '{spec}': expected NAME=DIMS such as x=1x3x224x224")
        shapes[name] = parsed
    return shapes


def load_onnx(
    path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None
) -> ir.Model:
    """Read an ONNX file (external data must stay inside the model's folder)."""
    path = Path(path)
    return import_proto(read_onnx(path), path, input_shapes)


def import_proto(
    proto: onnx.ModelProto,
    path: str | Path,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
) -> ir.Model:
    """Import an in-memory ModelProto; ``path`` names it in messages. The proto is not modified.
    ``input_values``: graph inputs bound to constants (``--input-value``, typed by
    ``input_values.typed_input_values``), so the Ifs they decide fold before inference."""
    path = Path(path)
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    proto = copy
    model_bytes = proto.ByteSize()  # what folding may expand by a ratio (limits: expansion)
    if not proto.HasField("graph") or not proto.graph.output:
        raise OpfuseError(f"{path}: not an ONNX model (no graph with outputs)")
    check_proto(proto, str(path))  # data sizes, attribute types, names: before any library
    sort_or_raise(proto.graph, str(path))
    if has_qoperators(proto):  # QLinearConv, QGemm...: QDQ first, so one fold serves both forms
        qoperator_to_qdq(proto, str(path))
    proto = _upgrade(proto, path)
    clear_nonpositive_dims(proto)  # exporters' -1 dims are unknown dims
    bind_input_values(proto, input_values or {})  # a bound input is an initializer from here on
    shapes = {k: v for k, v in (input_shapes or {}).items() if k not in (input_values or {})}
    _bind_proto_inputs(proto, bind_value_shapes(proto, shapes), path)
    check_windows(proto, str(path))  # attributes first: inference multiplies by them
    proto, folded = fold_constant_ifs(proto, str(path))  # the branch not taken is never inferred
    if folded:
        check_windows(proto, str(path))  # the nodes the taken branches brought in
    inferred = _infer_proto(proto, path)
    if trim_end_pads(proto, value_shapes(inferred.graph), str(path)):
        inferred = _infer_proto(proto, path)  # ceil_mode pools now counted as runtimes count
    proto = inferred
    values = value_shapes(proto.graph)  # against the inferred shapes, then sizes before folding
    check_windows(proto, str(path), values)
    check_sizes(proto, str(path), values, model_bytes)
    try:
        model = ir.from_proto(proto)
    except Exception as exc:  # onnx_ir raises several types on malformed protos
        raise OpfuseError(f"{path}: cannot read graph: {_first_line(exc)}") from None
    RemoveInitializersFromInputsPass()(model)
    LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    guard = FoldGuard(str(path), model_bytes)
    _fold(model, guard)
    settle_shapes(model, lambda m: _fold(m, guard), str(path))  # sizes behind Shape subgraphs
    try:
        fold_qdq(model)  # after shape inference: the folded graph (Conv on int8) is not valid ONNX
    except OpfuseError as exc:  # a node's bad quantization parameters: name the file too
        raise OpfuseError(f"{path}: {exc}") from None
    model.ir_version = max(model.ir_version or 0, MIN_IR_VERSION)
    NameFixPass()(model)
    require_static(model, str(path), allow_unknown=True)  # opaque ops may have unknown sizes
    verify(model, "import")
    return model


def _fold(model: ir.Model, guard: FoldGuard) -> None:
    onnxscript.optimizer.fold_constants(
        model,
        input_size_limit=_FOLD_LIMIT,
        output_size_limit=_FOLD_LIMIT,
        # onnxscript keeps ConstantOfShape to keep files small; a weight it builds must be a
        # real initializer for BatchNorm folding and weight accounting, so fold it. (Its folder
        # also forwards Identity and inference Dropout, as every runtime's loader does: no
        # runtime runs them as kernels, so "before" does not count them either.)
        should_fold=lambda node: _should_fold(node, guard),
    )
    _constants_to_initializers(model)
    onnxscript.optimizer.remove_unused_nodes(model)


def _should_fold(node: ir.Node, guard: FoldGuard) -> bool | None:
    guard(node)  # a fill over the constant limit ends here, before numpy allocates it
    if node.op_type == "ConstantOfShape":
        return True
    if node.op_type in groups.CONVERSIONS:
        return False  # int8 weights behind DQ stay int8: the QDQ fold reads them
    return None


def _constants_to_initializers(model: ir.Model) -> None:
    """Constant nodes left after lifting (value_ints, value_float... forms, or ones the version
    converter wrote) become initializers: weights are data, not kernels."""
    graph = model.graph
    for node in [n for n in graph if n.op_type == "Constant" and n.domain in ("", "ai.onnx")]:
        out = node.outputs[0]
        if out.const_value is None or out.is_graph_output():
            continue
        value = ir.Value(name=out.name, shape=out.shape, type=out.type, const_value=out.const_value)
        out.replace_all_uses_with(value)
        graph.remove(node, safe=True)
        graph.register_initializer(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_onnx(path: Path) -> onnx.ModelProto:
    """Parse an ONNX file, external data included; nothing else is done to it."""
    if not path.is_file():
        raise OpfuseError(f"{path}: no such file")
    data = path.read_bytes()
    if not data:
        raise OpfuseError(f"{path}: empty file, not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError:
        raise OpfuseError(f"{path}: not an ONNX model (protobuf parse failed; truncated or not binary ONNX)") from None
    _load_external_data(proto, path)
    return proto


def _load_external_data(proto: onnx.ModelProto, path: Path) -> None:
    external = check_external_locations(proto, path)
    check_external_bytes(external, path)
    if external:
        try:
            onnx.load_external_data_for_model(proto, str(path.resolve().parent))
        except Exception as exc:
            raise OpfuseError(f"{path}: cannot read external data: {_first_line(exc)}") from None


def check_external_bytes(external: list, path: Path) -> None:
    """What reading the external data will materialize, one copy per tensor (N initializers may
    name one region of one file: N copies), summed from their offsets and lengths (a tensor
    without a length reads to the end of its file) and held to the weights limit before any byte
    is read."""
    base, total, sizes = path.resolve().parent, 0, {}
    for count, tensor in enumerate(external, 1):
        info = {e.key: e.value for e in tensor.external_data}
        location = info["location"]
        if location not in sizes:
            sizes[location] = (base / location).stat().st_size
        try:
            offset = int(info.get("offset") or 0)
            length = int(info["length"]) if info.get("length") else sizes[location] - offset
        except ValueError:
            raise OpfuseError(f"{path}: tensor '{tensor.name}': external data offset or length "
                              "is not a number") from None
        total += max(length, 0)
        files = f"{len(sizes)} file{'s' if len(sizes) > 1 else ''}"
        refuse(f"{path}: the external data of {count} tensors ({files}, one copy per tensor)",
               total, "weights")


def check_external_locations(proto: onnx.ModelProto, path: Path) -> list:
    """The tensors whose data is external, each checked to name an existing file inside the
    model's folder (no absolute path, no ``../``, no symlink out of it): what import reads, and
    what validate checks before onnxruntime reads a model."""
    base = path.resolve().parent
    external = [
        t
        for t in onnx.external_data_helper._get_all_tensors(proto)
        if onnx.external_data_helper.uses_external_data(t)
    ]
    for tensor in external:
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        target = (base / location).resolve()
        if not location or Path(location).is_absolute() or not target.is_relative_to(base):
            raise OpfuseError(
                f"{path}: tensor '{tensor.name}' points to external data '{location}' outside the "
                "model's folder; refusing to read it"
            )
        if not target.is_file():
            raise OpfuseError(f"{path}: tensor '{tensor.name}': external data file '{location}' not found")
    return external


def _default_opset(proto: onnx.ModelProto) -> int:
    for op in proto.opset_import:
        if op.domain in ("", "ai.onnx"):
            return op.version
    return 0


def _upgrade(proto: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    version = _default_opset(proto)
    if version >= MIN_OPSET or version == 0:
        return proto
    try:
        return onnx.version_converter.convert_version(proto, MIN_OPSET)
    except Exception as exc:
        raise OpfuseError(
            f"{path}: cannot upgrade opset {version} to {MIN_OPSET}: {_first_line(exc)}"
        ) from None


def _infer_proto(proto: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """Shapes on the proto, before the IR is built: one C++ pass, no extra serialization (past
    2 GiB, without its large weights: large_proto.py). When the model's own annotations
    contradict inference (stale exports), inference wins. An If whose outputs inference leaves
    unknown (its branches disagree) goes through ``_opaque_ifs`` too: its shapes, or one line
    naming the input to bind."""
    options = dict(check_type=True, strict_mode=True, data_prop=True)
    try:
        inferred = infer_shapes(proto, str(path), **options)
        if not _unknown_if_outputs(inferred) or not _opaque_ifs(proto, path):
            return inferred
        return infer_shapes(proto, str(path), check_type=True, data_prop=True)
    except INFERENCE_ERRORS as exc:
        error = exc
    stripped = without_inferable_annotations(proto)
    if stripped is not None:
        try:
            return infer_shapes(stripped, str(path), **options)
        except INFERENCE_ERRORS as exc:
            error = exc  # with the annotations gone, what is left is the model's own fault
    if _opaque_ifs(proto, path):
        # an If left in place (its condition known at run time only): its outputs carry the shapes
        # both branches agree on, and inference inside its branches is the runtime's
        return infer_shapes(proto, str(path), check_type=True, data_prop=True)
    raise OpfuseError(f"{path}: shape inference failed: {_first_line(error)}") from None


def _unknown_if_outputs(proto: onnx.ModelProto) -> bool:
    """Whether a top-level If has an output without a static shape."""
    outs = {o for n in proto.graph.node if n.op_type == "If" for o in n.output}
    if not outs:
        return False
    known = value_shapes(proto.graph)
    return any(o not in known for o in outs)


def _opaque_ifs(proto: onnx.ModelProto, path: Path) -> bool:
    """Annotate the outputs of the graph's Ifs from their branches (if_fold.opaque_if_shapes);
    False when there is no If to blame."""
    try:
        loose = onnx.shape_inference.infer_shapes(proto, check_type=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError):
        return False
    return opaque_if_shapes(proto, loose, path)


def _bind_proto_inputs(
    proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], path: Path
) -> None:
    """Write bound dims into the proto's inputs so inference propagates them."""
    initializers = {t.name for t in proto.graph.initializer}
    inputs = {i.name: i for i in proto.graph.input if i.name not in initializers}
    for name in shapes:
        if name not in inputs:
            raise OpfuseError(
                f"{path}: --input-shape names '{name}', which is not a graph input or a "
                f"value a node produces (inputs: {', '.join(inputs) or 'none'})"
            )
    for name, vi in inputs.items():
        tensor = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        if name in shapes:
            dims = shapes[name]
            if tensor.HasField("shape") and len(tensor.shape.dim) != len(dims):
                raise OpfuseError(
                    f"{path}: --input-shape {name}: {len(dims)} dims given, the input has "
                    f"{len(tensor.shape.dim)}"
                )
            tensor.ClearField("shape")
            for d in dims:
                tensor.shape.dim.add().dim_value = d
            continue
        if not tensor.HasField("shape"):
            raise OpfuseError(
                f"{path}: input '{name}' has no shape; give it with --input-shape {name}=DIMS"
            )
        for axis, dim in enumerate(tensor.shape.dim):
            if dim.HasField("dim_value"):
                continue
            if axis == 0:
                dim.Clear()
                dim.dim_value = 1  # a leading symbolic dim is the batch: bind it to 1
            else:
                label = dim.dim_param or "?"
                raise OpfuseError(
                    f"{path}: input '{name}' dim {axis} ('{label}') is dynamic; "
                    f"bind it with --input-shape {name}=DIMS"
                )
