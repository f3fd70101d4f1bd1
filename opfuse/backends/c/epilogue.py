"""Epilogue composition: a chain of elementwise/broadcast ops applied to a value in registers.

A fused kernel's output stage is a straight chain (the partitioner only lets a node join the
kernel of the node it consumes, and only when it is that node's sole reader): each member reads
the previous member's value (``acc``) and possibly other operands (a bias, a folded scale, a
residual activation, a clamp bound). The chain is emitted as scalar C expressions inside the loop
that stores the kernel's output, so intermediates never reach memory. Operands are indexed by
broadcast strides against the kernel's output shape; constant scalars become literals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, bcast_strides, dims, flit, merge, offset_expr, who
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import clamp_bounds, const
from opfuse.ops.groups import C_EXPRS

ACC = "acc"


def _clip_bound(node: ir.Node, args: list[str | None], i: int, name: str) -> str | None:
    if i < len(args) and args[i] is not None:
        return args[i]
    value = attr(node, name)
    return None if value is None else flit(value)


def scalar_expr(node: ir.Node, a: list[str | None]) -> str:
    """One op's C expression on scalar arguments (C names, literals or loads; None = omitted)."""
    op = node.op_type
    x = a[0]
    # Comparisons are written so NaN falls through to the branch that returns x (a comparison
    # with NaN is false): NaN propagates as in onnxruntime, and Relu(-0.0) stays -0.0.
    if op == "Relu":
        return f"({x} < 0.0f ? 0.0f : {x})"
    if op == "Clip":
        lo, hi = _clip_bound(node, a, 1, "min"), _clip_bound(node, a, 2, "max")
        e = x
        if lo is not None:
            e = f"({e} < {lo} ? {lo} : {e})"
        if hi is not None:
            e = f"({e} > {hi} ? {hi} : {e})"
        return e
    if op == "LeakyRelu":
        return f"({x} >= 0.0f ? {x} : {flit(attr(node, 'alpha', 0.01))} * {x})"
    if op == "PRelu":
        return f"({x} >= 0.0f ? {x} : {a[1]} * {x})"
    if op == "Sigmoid":
        return f"opfuse_sigmoidf({x})"
    if op == "Tanh":
        return f"opfuse_tanhf({x})"
    if op in ("HardSigmoid", "HardSwish"):
        alpha = attr(node, "alpha", 0.2 if op == "HardSigmoid" else 1.0 / 6.0)
        beta = attr(node, "beta", 0.5)
        t = f"({flit(alpha)} * {x} + {flit(beta)})"
        t = f"({t} < 0.0f ? 0.0f : ({t} > 1.0f ? 1.0f : {t}))"
        return t if op == "HardSigmoid" else f"({x} * {t})"
    if op == "Elu":
        return f"({x} > 0.0f ? {x} : {flit(attr(node, 'alpha', 1.0))} * expm1f({x}))"
    if op == "Swish":  # x * sigmoid(alpha x) written as one division
        return f"({x} / (1.0f + opfuse_expf({flit(-attr(node, 'alpha', 1.0))} * {x})))"
    if op == "Gelu":
        if attr(node, "approximate", "none") == "tanh":
            k = flit(math.sqrt(2.0 / math.pi))
            return f"(0.5f * {x} * (1.0f + opfuse_tanhf({k} * ({x} + 0.044715f * {x} * {x} * {x}))))"
        return f"(0.5f * {x} * (1.0f + opfuse_erff({x} * {flit(1 / math.sqrt(2.0))})))"
    unary = {
        "Erf": "opfuse_erff({})",  # fastmath.py: branch-free, so the loop vectorizes
        "Neg": "(-{})",
        "Abs": "fabsf({})",
        "Sqrt": "sqrtf({})",
        "Exp": "opfuse_expf({})",
        "Log": "logf({})",
        "Reciprocal": "(1.0f / {})",
        # log(1 + e^x) = x + log1p(e^-x) for x > 0: no overflow to inf for large x
        "Softplus": "({0} > 0.0f ? {0} + log1pf(expf(-{0})) : log1pf(expf({0})))",
        "Identity": "{}",
    }
    if op in unary:
        return unary[op].format(x)
    binary = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}
    if op in binary:
        return f"({x} {binary[op]} {a[1]})"
    if op == "Pow":
        return f"powf({x}, {a[1]})"
    if op in ("Max", "Min", "Sum"):
        e = x
        for y in a[1:]:
            if op == "Sum":
                e = f"({e} + {y})"
            else:
                cmp = ">" if op == "Max" else "<"  # NaN in either operand gives NaN
                e = f"(({e} {cmp} {y} || {e} != {e}) ? {e} : {y})"
        return e
    if op == "BatchNormalization":
        eps = flit(attr(node, "epsilon", 1e-5))
        scale, bias, mean, var = a[1:5]
        return f"(({x} - {mean}) * ({scale} / sqrtf({var} + {eps})) + {bias})"
    raise OpfuseError(f"C backend: no C kernel for {who(node)} (no elementwise template)")


EPILOGUE_OPS = C_EXPRS  # the ops ``_scalar`` writes (the op registry's)


@dataclass(frozen=True)
class Operand:
    ptr: str  # kernel parameter name
    strides: tuple[int, ...]  # element strides against the chain's output shape


@dataclass
class Chain:
    """A straight chain of elementwise nodes over output ``shape``."""

    shape: tuple[int, ...]
    steps: list[tuple[ir.Node, list]] = field(default_factory=list)  # args: ACC/None/lit/("op",j)
    operands: list[Operand] = field(default_factory=list)

    def channel_steps(self, coords: Sequence[str], plane: int, bias: str | None
                      ) -> list[tuple[str, str | None]] | None:
        """The chain's vector spelling per output channel, for a store that holds one channel's
        run of pixels along a row in a register (``IsaKernels.tile_transpose``): steps
        ``("bias", p)`` (add ``p[o]``, ``bias`` the kernel's bias at the block's first channel),
        ``("add", p)`` (add the pixels at ``p + o*plane``: a residual operand in the output's
        NCHW layout, ``coords`` the block's first element) and ``("relu", None)``, for channel
        ``o`` of the block; None when a node is not one of them (the scalar spelling,
        ``emit_apply``, then runs)."""
        steps: list[tuple[str, str | None]] = [("bias", f"({bias})")] if bias is not None else []
        for node, args in self.steps:
            if node.op_type == "Relu" and args == [ACC]:
                steps.append(("relu", None))
                continue
            ops = [a for a in args if isinstance(a, tuple)]
            if (node.op_type not in ("Add", "Sum") or len(args) != 2 or ACC not in args
                    or len(ops) != 1):
                return None
            o = self.operands[ops[0][1]]
            if o.strides[1] != plane or o.strides[3] != 1:
                return None
            steps.append(("add", f"{o.ptr} + {offset_expr(coords, o.strides)}"))
        return steps

    def view(self, groups: Sequence[Sequence[int]]) -> list[tuple[int, ...]] | None:
        """Per-operand strides on a view of the output that merges the dims in ``groups``."""
        out = []
        for o in self.operands:
            s = merge(self.shape, groups, o.strides)
            if s is None:
                return None
            out.append(tuple(s))
        return out


def build_chain(
    nodes: Sequence[ir.Node],
    shape: tuple[int, ...],
    params: Params,
    acc_value: str | None,
    exact: bool = True,
) -> Chain:
    """The chain of ``nodes`` over ``shape``; ``acc_value`` names the value already in registers
    (None for a standalone elementwise kernel: its first node reads operands only). With ``exact``,
    every node must produce exactly ``shape`` (an anchor is never recomputed)."""
    chain = Chain(shape)
    current = acc_value
    keys: dict[str, int] = {}
    for node in nodes:
        if node.op_type not in EPILOGUE_OPS or node.domain not in ("", "ai.onnx"):
            raise OpfuseError(f"C backend: no C kernel for {who(node)}")
        out_shape = dims(node.outputs[0], node)
        try:
            ok = out_shape == shape if exact else bool(bcast_strides(out_shape, shape) or True)
        except ValueError:
            ok = False
        if not ok:
            raise OpfuseError(
                f"C backend: {who(node)} produces {list(out_shape)}, which the fused kernel's "
                f"output stage ({list(shape)}) cannot hold"
            )
        args: list = []
        for i, value in enumerate(node.inputs):
            if value is None:
                args.append(None)
            elif current is not None and value.name == current:
                args.append(ACC)
            else:
                args.append(_operand(node, i, value, shape, params, chain, keys))
        chain.steps.append((node, args))
        current = node.outputs[0].name
    return chain


def _operand(node, i, value, shape, params: Params, chain: Chain, keys: dict[str, int]):
    arr = const(value)
    if arr is not None and arr.size == 1:
        return flit(float(np.asarray(arr).ravel()[0]))
    vshape = dims(value, node)
    if node.op_type == "BatchNormalization" and i > 0:
        vshape = vshape + (1,) * (len(shape) - 2)
    try:
        strides = tuple(bcast_strides(vshape, shape))
    except ValueError:
        raise OpfuseError(
            f"C backend: {who(node)}: operand '{value.name}' {list(vshape)} does not broadcast to "
            f"the kernel's output {list(shape)}"
        ) from None
    key = f"{value.name}|{vshape}"
    if key not in keys:
        ptr = params.inp(value, node)
        keys[key] = len(chain.operands)
        chain.operands.append(Operand(ptr, strides))
    return ("op", keys[key])


def emit_apply(
    w: CWriter,
    chain: Chain,
    vstrides: Sequence[Sequence[int]],
    coords: Sequence[str],
    length: int | str,
    src: Callable[[str], str] | None,
    dst: Callable[[str], str],
    var: str = "i",
) -> None:
    """``for i < length: dst(i) = chain(src(i))`` along the last dim of a view of the output.

    ``coords`` are the row's start coordinates on every view dim (the last one the row's first
    element), ``vstrides`` the operands' strides on that view."""
    w.open("")
    loads = operand_loads(w, chain, vstrides, coords, var)
    w.open(f"for (int {var} = 0; {var} < {length}; ++{var})")
    current = None
    if src is not None:
        w(f"const float v = {src(var)};")
        current = "v"
    w(f"{dst(var)} = {emit_steps(w, chain, current, loads)};")
    w.close()
    w.close()


def operand_loads(w: CWriter, chain: Chain, vstrides: Sequence[Sequence[int]],
                  coords: Sequence[str], var: str = "i") -> list[str]:
    """The pointers ``o<j>`` to the operands at a row's start (``coords``, on the view of
    ``vstrides``), and each operand's load at element ``var`` of the row."""
    loads = []
    for j, (operand, vs) in enumerate(zip(chain.operands, vstrides, strict=True)):
        w(f"const float *o{j} = {operand.ptr} + {offset_expr(coords, vs)};")
        inner = vs[-1]
        loads.append(
            f"o{j}[0]" if inner == 0 else (f"o{j}[{var}]" if inner == 1 else f"o{j}[{var}*{inner}]")
        )
    return loads


def emit_steps(w: CWriter, chain: Chain, current: str | None, loads: Sequence[str]) -> str:
    """The chain's steps on the scalar ``current`` (the accumulator), one statement each; returns
    the C name of the result."""
    for k, (node, args) in enumerate(chain.steps):
        cargs: list[str | None] = []
        for a in args:
            if a is None:
                cargs.append(None)
            elif a == ACC:
                cargs.append(current)
            elif isinstance(a, tuple):
                cargs.append(loads[a[1]])
            else:
                cargs.append(a)
        if node.op_type == "Clip":  # one select per statement: gcc if-converts and vectorizes it
            lo, hi = _clip_bound(node, cargs, 1, "min"), _clip_bound(node, cargs, 2, "max")
            w(f"float v{k} = {cargs[0]};")
            if lo is not None:
                w(f"v{k} = v{k} < {lo} ? {lo} : v{k};")
            if hi is not None:
                w(f"v{k} = v{k} > {hi} ? {hi} : v{k};")
        else:
            w(f"const float v{k} = {scalar_expr(node, cargs)};")
        current = f"v{k}"
    return current


def full_view(chain: Chain, split: int) -> tuple[list[list[int]], list[tuple[int, ...]] | None]:
    """The view grouping dims [0..split) one by one and [split..) into one row dim."""
    r = len(chain.shape)
    groups = [[d] for d in range(split)] + [list(range(split, r))]
    return groups, chain.view(groups)


def clamps(nodes: list[ir.Node]) -> list[tuple[str | None, str | None]] | None:
    """The epilogue ``nodes`` (each reading the one before) as (low, high) C literals (None: no
    bound), or None when one is not a Relu or a Clip with constant bounds
    (``opfuse.ir.values.clamp_bounds``, which the cost asks too)."""
    bounds = clamp_bounds(nodes)
    if bounds is None:
        return None
    return [tuple(None if v is None else flit(v) for v in pair) for pair in bounds]
