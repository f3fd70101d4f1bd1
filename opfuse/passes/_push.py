"""Moving a Transpose from the inputs of an elementwise node to its output (shared by the
``transpose_unary``, ``transpose_affine`` and ``transpose_elementwise`` passes).

For an elementwise ``f`` (every output element depends only on the input elements at the same
index, after broadcasting) and a permutation ``p``:

    f(Transpose(a, p), Transpose(b, p), c) = Transpose(f(a, b, c'), p),   c' = Transpose(c, p^-1)

where a constant ``c`` of lower rank is first given leading 1-axes (numpy broadcasting), and a
one-element operand is left as it is (it broadcasts the same way in any layout). An operand that is
neither is only accepted when the graph already holds ``Transpose(operand, p^-1)`` (reading it adds
no work); otherwise the node is left alone, so a push never adds a Transpose on a side input.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from opfuse.passes._layout import (
    Delta,
    Match,
    copy_node,
    existing_transpose,
    get_quant_of,
    inverse,
    is_one_element,
    moved_quant,
    new_value,
    only_read_by,
    permuted_constant,
    permuted_shape,
    rank_of,
    transpose_node,
    transpose_source,
)

REDUCE_OPS = (
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
)
UNARY_OPS = (
    "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Clip", "Elu",
    "Selu", "Celu", "Softplus", "Softsign", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal",
    "Floor", "Ceil", "Round", "Erf", "Sign", "Not", "IsNaN", "Sin", "Cos", "Mish", "Gelu",
    "Swish", "ThresholdedRelu", "Cast",
)  # one data input (PRelu's slope and Clip's bounds are the other inputs: constants)
ELEMENTWISE_OPS = (
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod",
)
# Everything a Transpose can move past: a Transpose read only by these is worth moving even when
# another reader still needs it (that reader will move it too).
MOVABLE = (*UNARY_OPS, *ELEMENTWISE_OPS, *REDUCE_OPS, "Transpose", "Pad", "Concat", "Identity")


@dataclass(frozen=True)
class Operands:
    perm: tuple[int, ...]
    inputs: list[ir.Value | None]  # in the Transpose's source layout
    dying: list[ir.Node]  # input Transposes read by nobody else
    initializers: list[ir.Value]
    transposed: int  # operands that were Transpose(., perm)
    constants: int  # constants that had to be permuted
    other: int  # non-constant operands read through an existing inverse Transpose


def plan_operands(node: ir.Node, positions: range | None = None) -> Operands | None:
    """How ``node``'s inputs (those in ``positions``; all by default) read in the source layout of
    the first input Transpose, or None when one of them cannot be moved without a new Transpose."""
    if len(node.outputs) != 1:
        return None
    idx = range(len(node.inputs)) if positions is None else positions
    sources = (transpose_source(node.inputs[i]) for i in idx)
    first = next((src for src in sources if src is not None), None)
    if first is None:
        return None
    perm = first[1]
    rank = len(perm)
    if rank_of(node.outputs[0]) not in (None, rank):
        return None
    inputs = list(node.inputs)
    dying: list[ir.Node] = []
    inits: list[ir.Value] = []
    transposed = constants = other = 0
    for i in idx:
        value = node.inputs[i]
        if value is None:
            continue
        src = transpose_source(value)
        if src is not None and src[1] == perm:
            inputs[i] = src[0]
            transposed += 1
            if only_read_by(value, node) and src[2] not in dying:
                dying.append(src[2])
            continue
        if value.const_value is not None:
            moved = permuted_constant(value, rank, perm)
            if moved is None:
                return None
            inputs[i] = moved[0]
            if moved[1] is not None:
                inits.append(moved[1])
                constants += 1
            continue
        value_rank = rank_of(value)
        if is_one_element(value) and value_rank is not None and value_rank <= rank:
            continue
        reuse = existing_transpose(value, inverse(perm)) if value_rank == rank else None
        if reuse is None:
            return None
        inputs[i] = reuse
        other += 1
    return Operands(perm, inputs, dying, inits, transposed, constants, other)


def worth_moving(node: ir.Node, ops: Operands) -> bool:
    """A move that kills an input Transpose pays; one that leaves every input Transpose alive pays
    only when their other readers can take the Transpose further too."""
    if ops.dying:
        return True
    for value in node.inputs:
        src = transpose_source(value)
        if src is None or src[1] != ops.perm or value is None:
            continue
        if value.is_graph_output() or any(u.op_type not in MOVABLE for u, _ in value.uses()):
            return False
    return True


def move_past(node: ir.Node, ops: Operands, **attrs) -> Delta:
    """``node`` on the source-layout operands, followed by ``Transpose(., perm)``."""
    y = node.outputs[0]
    inner = new_value(y, permuted_shape(y.shape, ops.perm), moved_quant(get_quant_of(y), ops.perm))
    moved = copy_node(node, ops.inputs, inner, **attrs)
    out = new_value(y, y.shape, get_quant_of(y))
    back = transpose_node(inner, ops.perm, out, f"{node.name}_transpose")
    return Delta(Match([*ops.dying, node], [y]), [moved, back], [out], ops.initializers)
