"""Elementwise kernels over typed operands: masks (Where, comparisons, Not/And/Or/Xor), Cast,
Range, and integer arithmetic, each its own kernel (docs/architecture.md, "Transformer ops in
C").

What a transformer export keeps after folding is small integer and boolean work on computed
values: an attention mask compared, inverted and selected with Where, position ids from a
Range, a Cast between int64, bool and float. The float epilogue chain holds float registers only,
so these run here, one node per kernel, every operand in its own C type (bool is a uint8_t of 0
or 1, as numpy and onnxruntime store it) and broadcast to the output with numpy's rules.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse.backends.c.cgen import (
    CWriter,
    attr,
    bcast_strides,
    collapse,
    contiguous,
    dims,
    offset_expr,
    who,
)
from opfuse.backends.c.ctype import BOOL, FLOAT, ctype_of
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ops import groups

_COMPARE = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=",
            "GreaterOrEqual": ">="}
_LOGIC = {"And": "&&", "Or": "||", "Xor": "!="}
_FOLDS = {"Max": "max", "Min": "min"}  # variadic folds
_ARITH = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}
MASK_OPS = groups.C_TYPED - {"Range"}  # masks, logic, select and casts
INT_OPS = groups.INTEGER_OPS  # when a value is not float32


def is_typed(node: ir.Node) -> bool:
    """Whether ``node`` runs here: a mask op, or arithmetic on a value that is not float32 (an
    int64 shape or index computed at run time)."""
    if node.op_type in MASK_OPS or node.op_type == "Range":
        return True
    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    return node.op_type in INT_OPS and any(ctype_of(v) not in (FLOAT, None) for v in values)


def _expr(node: ir.Node, a: list[str], out_c: str) -> str:
    op = node.op_type
    if op == "Where":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if op == "Not":
        return f"(uint8_t)!{a[0]}"
    if op in _COMPARE:
        return f"(uint8_t)({a[0]} {_COMPARE[op]} {a[1]})"
    if op in _LOGIC:
        return f"(uint8_t)((!!{a[0]}) {_LOGIC[op]} (!!{a[1]}))"
    if op == "Cast":
        return f"(uint8_t)({a[0]} != 0)" if ctype_of(node.outputs[0]) is BOOL \
            else f"({out_c})({a[0]})"
    if op in _ARITH:
        return f"({out_c})({a[0]} {_ARITH[op]} {a[1]})"
    if op == "Neg":
        return f"({out_c})(-{a[0]})"
    if op == "Abs":
        return f"({a[0]} < 0 ? ({out_c})(-{a[0]}) : {a[0]})"
    if op in _FOLDS:
        e = a[0]
        for b in a[1:]:
            e = f"({e} {'>' if op == 'Max' else '<'} {b} ? {e} : {b})"
        return e
    raise OpfuseError(f"C backend: no C kernel for {who(node)} (no typed template)")


def emit_typed(w: CWriter, node: ir.Node, params: Params) -> None:
    """One typed elementwise node (or Range) over its output, operands broadcast to it."""
    if node.op_type == "Range":
        _emit_range(w, node, params)
        return
    out_v = node.outputs[0]
    shape = dims(out_v, node)
    out_ct = ctype_of(out_v) or FLOAT
    if node.op_type == "Cast" and attr(node, "to") is not None and ctype_of(out_v) is None:
        raise OpfuseError(f"C backend: {who(node)}: Cast to {out_v.dtype} is not emitted")
    inputs = [v for v in node.inputs if v is not None]
    strides = []
    for value in inputs:
        try:
            strides.append(bcast_strides(dims(value, node), shape))
        except ValueError:
            raise OpfuseError(f"C backend: {who(node)}: '{value.name}' does not broadcast to "
                              f"its output {list(shape)}") from None
    ptrs = [params.inp(v, node) for v in inputs]
    y = params.out(out_v, node)
    if math.prod(shape) == 0:
        return
    cs, cst = collapse(shape, [*strides, contiguous(shape)])
    loops = [f"i{d}" for d in range(len(cs))]
    w.open("")
    for d, size in enumerate(cs):
        w(f"for (int i{d} = 0; i{d} < {size}; ++i{d})")
    loads = [f"{p}[{offset_expr(loops, s)}]" for p, s in zip(ptrs, cst[:-1], strict=True)]
    w(f"    {y}[{offset_expr(loops, cst[-1])}] = {_expr(node, loads, out_ct.name)};")
    w.close()


def _emit_range(w: CWriter, node: ir.Node, params: Params) -> None:
    """``y[i] = start + i * delta`` (the length is the output's static size)."""
    out_v = node.outputs[0]
    (n,) = dims(out_v, node)
    ct = ctype_of(out_v) or FLOAT
    start, delta = (params.inp(node.inputs[i], node) for i in (0, 2))
    y = params.out(out_v, node)
    w(f"for (int i = 0; i < {n}; ++i) {y}[i] = ({ct.name})({start}[0] + ({ct.name})i * "
      f"{delta}[0]);")
