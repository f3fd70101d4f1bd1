"""If nodes at import: folded when their condition is a constant, else kept as opaque ops.

``fold_constant_ifs`` runs on the proto before shape inference: small constant subgraphs
(a bound ``--input-value``, Constant nodes, Equal/Cast/Not... over them) are evaluated with
onnx's reference evaluator, and an If whose condition is then known is replaced by the nodes of
the branch it takes, so the branch not taken (silero VAD's 8 kHz one, which fails shape inference
at 16 kHz input sizes) is never inferred.

``opaque_if_shapes`` serves an If left in place when whole-model inference fails inside one of
its branches: each branch is inferred on its own over the outer values it reads; when both give
the same static output shapes those are the If's, else the import stops with one line naming the
graph inputs the condition reads (bind them with ``--input-value``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from opfuse.errors import OpfuseError
from opfuse.safe_text import for_terminal

_SMALL = 4096  # elements: a constant subgraph evaluated at import reads and writes at most this
_IF = "If"
# what an If's condition is computed with; none writes more elements than its inputs broadcast
# to, which is checked before it runs (an Expand or ConstantOfShape could build gigabytes)
_CONDITION_OPS = frozenset({
    "Constant", "Identity", "Cast", "Not", "Neg", "Abs", "Equal", "Greater", "Less",
    "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Add", "Sub", "Mul", "Div", "Min", "Max",
    "Where", "Squeeze", "Unsqueeze", "Reshape",
})
_SHAPE_INPUT = frozenset({"Squeeze", "Unsqueeze", "Reshape"})  # the second input is not data


def _default(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx")


def _numel(t: onnx.TensorProto) -> int:
    return math.prod(t.dims)


def _branch(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute)


def fold_constant_ifs(proto: onnx.ModelProto) -> int:
    """Replace every top-level If whose condition is a constant by its taken branch (module
    docstring); the number of Ifs folded."""
    graph = proto.graph
    if not any(n.op_type == _IF and _default(n) for n in graph.node):
        return 0
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer if _numel(t) <= _SMALL}
    names = _all_names(graph)
    nodes = list(graph.node)
    folded, i = 0, 0
    while i < len(nodes):
        node = nodes[i]
        if node.op_type == _IF and _default(node) and node.input[0] in known \
                and known[node.input[0]].size == 1:
            taken = bool(known[node.input[0]].reshape(-1)[0])
            body, inits = _inlined(_branch(node, "then_branch" if taken else "else_branch"),
                                   node, names)
            graph.initializer.extend(inits)
            known.update({t.name: numpy_helper.to_array(t) for t in inits if _numel(t) <= _SMALL})
            nodes[i:i + 1] = body
            folded += 1
            continue
        if _default(node) and not _has_subgraph(node) and all(n in known for n in node.input if n):
            evaluate_small(node, known, opset)
        i += 1
    if folded:
        del graph.node[:]
        graph.node.extend(nodes)
    return folded


def evaluate_small(node: onnx.NodeProto, known: dict[str, np.ndarray], opset: int) -> None:
    """The node's outputs into ``known`` when they are small (else, or on any error, nothing:
    the node stays for the optimizer and the runtime)."""
    if node.op_type not in _CONDITION_OPS or sum(known[n].size for n in node.input if n) > _SMALL:
        return
    data = node.input[:1] if node.op_type in _SHAPE_INPUT else node.input
    try:
        if math.prod(np.broadcast_shapes(*(known[n].shape for n in data if n))) > _SMALL:
            return
    except ValueError:  # shapes that do not broadcast: the runtime's to report
        return
    try:
        model = onnx.helper.make_model(
            onnx.helper.make_graph([node], "eval", [], []),
            opset_imports=[onnx.helper.make_opsetid("", opset)])
        outputs = ReferenceEvaluator(model).run(
            list(node.output), {n: known[n] for n in node.input if n})
    except Exception:  # an op the evaluator lacks, or bad data: left for the runtime
        return
    for name, value in zip(node.output, outputs, strict=False):
        arr = np.asarray(value)
        if name and arr.size <= _SMALL:
            known[name] = arr


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in (*graph.input, *graph.output)}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.output)
        names.update(node.input)
    return names


def _inlined(branch: onnx.GraphProto, node: onnx.NodeProto,
             names: set[str]) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The branch's nodes and initializers, ready for the outer graph: names the branch defines
    renamed where they clash with outer ones, its outputs become the If's outputs."""
    defined = {t.name for t in branch.initializer}
    for n in branch.node:
        defined.update(o for o in n.output if o)
    rename: dict[str, str] = {}
    for name in sorted(defined):
        if name in names:
            fresh, k = f"{name}_if", 1
            while fresh in names or fresh in defined:
                fresh, k = f"{name}_if{k}", k + 1
            rename[name] = fresh
            names.add(fresh)
        else:
            names.add(name)
    producers = {o for n in branch.node for o in n.output if o}
    extra: list[onnx.NodeProto] = []
    for out, target in zip(branch.output, node.output, strict=True):
        if out.name in producers and [o.name for o in branch.output].count(out.name) == 1:
            rename[out.name] = target  # the producer writes the If's output directly
        else:
            extra.append(onnx.helper.make_node("Identity", [rename.get(out.name, out.name)],
                                               [target]))
    body = []
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        _rename(copy, rename)
        body.append(copy)
    inits = []
    for t in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = rename.get(t.name, t.name)
        inits.append(copy)
    return body + extra, inits


def _rename(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    for k, name in enumerate(node.input):
        node.input[k] = rename.get(name, name)
    for k, name in enumerate(node.output):
        node.output[k] = rename.get(name, name)
    for a in node.attribute:  # a nested subgraph reads the branch's values from outer scope
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for inner in g.node:
                _rename(inner, rename)


def condition_inputs(graph: onnx.GraphProto, node: onnx.NodeProto) -> list[str]:
    """The graph inputs the If's condition is computed from."""
    producer = {o: n for n in graph.node for o in n.output}
    inputs = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    found, todo, seen = [], [node.input[0]], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            found.append(name)
        elif name in producer:
            todo.extend(n for n in producer[name].input if n)
    return sorted(found)


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
            inputs = condition_inputs(proto.graph, node)
            hint = (f"bind {', '.join(repr(i) for i in inputs)} with --input-value "
                    f"{inputs[0]}=VALUE" if inputs else "its condition is computed at run time")
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
