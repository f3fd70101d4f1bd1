"""If nodes at import: folded when their condition is a constant, else kept as opaque ops.

``fold_constant_ifs`` runs before whole-model shape inference, once the bound input shapes and
``--input-value`` constants are in the proto: onnxscript's constant folder (its own per-node shape
inference on) evaluates what an If's condition is computed from (Constant, Equal, Cast, Not, and
``Shape``/``Size`` of a value whose shape is now static), inlines the branch an If takes, and
goes on into the inlined nodes, so nested Ifs decided by shape arithmetic fold too (silero VAD's
decoder: ``Shape -> Gather -> Equal``, ``Size -> Equal -> Not -> Cast``), and the branch not
taken (its 8 kHz one, which fails shape inference at 16 kHz input sizes) is never inferred.
Nothing large is built there: a node folds only when shape inference says each output has at
most ``_SMALL`` elements, and the folds of one import together at most ``_BUDGET``.

``opaque_if_shapes`` serves an If left in place when whole-model inference fails inside one of
its branches: each branch is inferred on its own over the outer values it reads; when both give
the same static output shapes those are the If's, else the import stops with one line naming the
graph inputs the condition reads (bind them with ``--input-value``).
"""

from __future__ import annotations

import math
from pathlib import Path

import onnx
import onnx_ir as ir
import onnxscript.optimizer
from onnx_ir.passes.common import NameFixPass

from opfuse.errors import OpfuseError
from opfuse.safe_text import for_terminal

_SMALL = 4096  # elements: what one fold at this stage may write
_BUDGET = 1 << 20  # elements: what all of them together may write
_ROUNDS = 8  # fold, then fold what the inlined branches expose, until nothing changes
_IF = "If"


def _default(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx")


def _branch(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def _count_ifs(graph: ir.Graph) -> int:
    count = 0
    for node in graph:
        count += node.op_type == _IF and node.domain in ("", "ai.onnx")
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                count += _count_ifs(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                count += sum(_count_ifs(g) for g in attr.as_graphs())
    return count


def _node_names(graph: ir.Graph) -> dict[int, str]:
    """Every node's name by identity, subgraphs included: the folder prefixes an inlined node's
    name with its If's, once per level (silero: 'If_0_If_0_else.../decoder/If_1_If_0_else...')."""
    names: dict[int, str] = {}
    for node in graph:
        if node.name:
            names[id(node)] = node.name
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                names.update(_node_names(attr.as_graph()))
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.as_graphs():
                    names.update(_node_names(sub))
    return names


def _restore_names(graph: ir.Graph, names: dict[int, str]) -> None:
    """Inlined nodes take back the name the model gave them, where no other node has it."""
    taken = {n.name for n in graph}
    for node in graph:
        old = names.get(id(node))
        if old and old != node.name and old not in taken:
            taken.discard(node.name)
            node.name = old
            taken.add(old)


class _SmallFolds:
    """onnxscript's ``should_fold``: a node folds when its outputs' inferred shapes are static
    and small, within a budget for the whole pass; anything else is left to the runtime (or to
    the import's later folding, after the size checks)."""

    def __init__(self) -> None:
        self.spent = 0

    def __call__(self, node: ir.Node) -> bool | None:
        sizes = []
        for out in node.outputs:
            if out.shape is None or not out.shape.is_static():
                return False
            sizes.append(math.prod(int(d) for d in out.shape))
        if any(s > _SMALL for s in sizes) or self.spent + sum(sizes) > _BUDGET:
            return False
        self.spent += sum(sizes)
        return True if node.op_type == "ConstantOfShape" else None  # onnxscript keeps fills


def fold_constant_ifs(proto: onnx.ModelProto, path: str) -> tuple[onnx.ModelProto, int]:
    """``proto`` with every If whose condition is a constant once shapes and values are bound
    replaced by its taken branch, at any depth (module docstring), and the number of Ifs gone.
    A model none of whose Ifs folds comes back as it was."""
    if not any(n.op_type == _IF and _default(n) for n in proto.graph.node):
        return proto, 0
    try:
        model = ir.from_proto(proto)
    except Exception as exc:  # onnx_ir raises several types on malformed protos
        raise OpfuseError(f"{path}: cannot read graph: {_first_line(exc)}") from None
    before = left = _count_ifs(model.graph)
    names = _node_names(model.graph)
    budget = _SmallFolds()
    for _ in range(_ROUNDS):
        try:
            result = onnxscript.optimizer.fold_constants(
                model, onnx_shape_inference=True, input_size_limit=_SMALL,
                output_size_limit=_SMALL, should_fold=budget)
        except OpfuseError:
            raise
        except Exception:  # an op the folder cannot evaluate: the model as it was, Ifs opaque
            return proto, 0
        left = _count_ifs(model.graph)
        if not result.modified:
            break
    if left == before:
        return proto, 0
    onnxscript.optimizer.remove_unused_nodes(model)
    _restore_names(model.graph, names)
    NameFixPass()(model)  # values of two inlined branches may share a name (sibling scopes)
    return ir.to_proto(model), before - left


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def condition_inputs(graph: onnx.GraphProto, node: onnx.NodeProto) -> tuple[list[str], list[str]]:
    """The graph inputs the If's condition is computed from: those whose values it reads, and
    those it reads only the shape of (through Shape or Size: bound by then, so an If left on
    them is one the model's own inference could not settle at those shapes)."""
    producer = {o: n for n in graph.node for o in n.output}
    inputs = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    values, shapes, todo, seen = set(), set(), [(node.input[0], False)], set()
    while todo:
        name, via_shape = todo.pop()
        if (name, via_shape) in seen:
            continue
        seen.add((name, via_shape))
        if name in inputs:
            (shapes if via_shape else values).add(name)
        elif name in producer:
            made = producer[name]
            shape_only = via_shape or (made.op_type in ("Shape", "Size") and _default(made))
            todo.extend((n, shape_only) for n in made.input if n)
    return sorted(values), sorted(shapes - values)


def opaque_if_shapes(proto: onnx.ModelProto, inferred: onnx.ModelProto, path: Path) -> bool:
    """Annotate the outputs of every top-level If of ``proto`` with the shapes its branches agree
    on (module docstring); False when the graph has no If. Raises naming the input to bind."""
    ifs = [n for n in proto.graph.node if n.op_type == _IF and _default(n)]
    if not ifs:
        return False
    types = {v.name: v for v in (*inferred.graph.input, *inferred.graph.value_info,
                                 *inferred.graph.output)}
    for t in inferred.graph.initializer:
        types.setdefault(t.name, onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    for index, node in enumerate(ifs):
        label = f"If node '{node.name}'" if node.name else f"If node {index + 1} (unnamed)"
        shapes = []
        for name in ("then_branch", "else_branch"):
            got = _branch_outputs(_branch(node, name), types, proto)
            shapes.append(got)
        why = None
        if any(isinstance(s, str) for s in shapes):
            which = "then" if isinstance(shapes[0], str) else "else"
            why = f"its {which} branch fails shape inference ({shapes[0 if which == 'then' else 1]})"
        elif [_dims(v) for v in shapes[0]] != [_dims(v) for v in shapes[1]]:
            why = "its branches give different output shapes"
        elif any(d is None for v in shapes[0] for d in (_dims(v) or [None])):
            why = "its output shapes are not static"
        if why is not None:
            inputs, shaped = condition_inputs(proto.graph, node)
            if inputs:
                hint = (f"bind {', '.join(repr(i) for i in inputs)} with --input-value "
                        f"{inputs[0]}=VALUE")
            elif shaped:
                hint = (f"its condition reads the shapes of {', '.join(repr(i) for i in shaped)}"
                        ", bound with --input-shape: the model does not take those shapes here")
            else:
                hint = "its condition is computed at run time"
            raise OpfuseError(for_terminal(f"{path}: {label}: {why}; {hint}"))
        stale = [v for v in proto.graph.value_info if v.name in set(node.output)]
        for v in stale:  # an exporter's annotation of what inference could not settle
            proto.graph.value_info.remove(v)
        for out, value in zip(node.output, shapes[0], strict=True):
            info = onnx.ValueInfoProto()
            info.CopyFrom(value)
            info.name = out
            proto.graph.value_info.append(info)
    return True


def _dims(value: onnx.ValueInfoProto) -> list[int | None] | None:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]


def _branch_outputs(branch: onnx.GraphProto, types: dict, proto: onnx.ModelProto):
    """The branch's inferred output value infos, or the first line of its inference error."""
    defined = {t.name for t in branch.initializer} | {o for n in branch.node for o in n.output}
    free = sorted({i for n in branch.node for i in n.input if i and i not in defined}
                  | {o.name for o in branch.output if o.name not in defined})
    missing = [n for n in free if n not in types]
    if missing:
        return f"'{missing[0]}' has no type"
    graph = onnx.helper.make_graph(list(branch.node), "branch", [types[n] for n in free],
                                   list(branch.output), list(branch.initializer))
    model = onnx.helper.make_model(graph, opset_imports=list(proto.opset_import),
                                   ir_version=proto.ir_version)
    try:
        done = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                 data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as exc:
        text = str(exc).strip().splitlines()
        first = text[0] if text else type(exc).__name__
        return first.replace("[ShapeInferenceError] Inference error(s): ", "")[:200]
    known = {v.name: v for v in (*done.graph.value_info, *done.graph.input, *done.graph.output)}
    out = [known.get(o.name) for o in branch.output]
    if any(v is None or not v.type.HasField("tensor_type") for v in out):
        return "an output has no inferred type"
    return out
