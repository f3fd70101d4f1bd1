"""int8 epilogues: a chain of elementwise ops on an integer value inside the store loop.

Each step computes exactly what the op's own unfused int8 kernel computes from int8 inputs, so a
fused kernel equals the unfused ops bit for bit: the anchor's value is requantized to its own
int8 output first, then every following op applies its own arithmetic (TFLite's or ONNX's):

* Relu / Clip: the requantization clamp in the integer domain (input and output share the Q's
  parameters, docs/architecture.md), so an anchor + clamp is TFLite's fused activation.
* Add / Sub: TFLite's rescaling of both inputs to twice the larger scale with 20 bits of
  headroom, one output multiplier; ``onnx``: dequantize, add in float, quantize half to even.
* Mul: one multiplier s1 s2 / s_out on the product of the offset inputs.
* Unary ops (Sigmoid, Tanh, HardSwish, LeakyRelu...): a 256-entry table (see ``lut``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, bcast_strides, dims, flit, offset_expr, who
from opfuse.backends.c.ctype import INT8, INT32, ctype_of
from opfuse.backends.c.int8.common import clamp_bounds, int_ctype, quant, rounding
from opfuse.backends.c.int8.lut import LUT_OPS, table
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError
from opfuse.ir.values import const
from opfuse.ops import groups
from opfuse.quant import ONNX, add_params, quantize_multiplier

CLAMP_OPS = groups.C_INT8_CLAMPS
BINARY_OPS = groups.C_INT8_BINARY
CHAIN_OPS = CLAMP_OPS | BINARY_OPS | LUT_OPS


class Chain8:
    """Emits the chain of ``nodes`` on the output ``shape`` at loop coordinates ``coords``."""

    def __init__(self, nodes: Sequence[ir.Node], shape: tuple[int, ...], params: Params,
                 acc_value: str | None) -> None:
        for node in nodes:
            if node.op_type not in CHAIN_OPS:
                raise OpfuseError(f"C backend: no int8 C kernel for {who(node)} in an epilogue")
        self.nodes = list(nodes)
        self.shape = shape
        self.params = params
        self.acc_value = acc_value
        self.mode = rounding(params)
        self.ptrs: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.k = 0

    def _load(self, node: ir.Node, value: ir.Value, coords: Sequence[str]) -> str:
        arr = const(value)
        if arr is not None and arr.size == 1:
            return str(int(np.asarray(arr).ravel()[0]))
        if value.name not in self.ptrs:
            vshape = dims(value, node)
            try:
                st = tuple(bcast_strides(vshape, self.shape))
            except ValueError:
                raise OpfuseError(
                    f"C backend: {who(node)}: operand '{value.name}' {list(vshape)} does not "
                    f"broadcast to the kernel's output {list(self.shape)}"
                ) from None
            ct = int_ctype(value, node) if arr is None else (ctype_of(value) or INT8)
            self.ptrs[value.name] = (self.params.inp(value, node, ct), st)
        ptr, st = self.ptrs[value.name]
        return f"(int32_t){ptr}[{offset_expr(list(coords), st)}]"

    def emit(self, w: CWriter, cur: str | None, coords: Sequence[str]) -> str:
        """Statements computing the chain; returns the C name of the final int32 value."""
        current = self.acc_value
        for node in self.nodes:
            args = []
            for value in node.inputs:
                if value is None:
                    args.append(None)
                elif current is not None and value.name == current and cur is not None:
                    args.append(cur)
                else:
                    args.append(self._load(node, value, coords) if node.op_type in BINARY_OPS
                                or value is node.inputs[0] else None)
            cur = self._step(w, node, args)
            current = node.outputs[0].name
        if cur is None:
            raise OpfuseError("C backend: empty int8 chain")
        return cur

    def _step(self, w: CWriter, node: ir.Node, args: list) -> str:
        op = node.op_type
        out = node.outputs[0]
        ct = int_ctype(out, node)
        qo = quant(out, node)
        name = f"q{self.k}"
        self.k += 1
        x = args[0]
        if op in CLAMP_OPS:
            qi = quant(node.inputs[0], node)
            if qi != qo:
                raise OpfuseError(
                    f"C backend: {who(node)}: an int8 {op} needs the same quantization on its "
                    "input and output (the Q's parameters on both sides)"
                )
            lo, hi = clamp_bounds(node, qo, ct, self.mode)
            w(f"const int32_t {name} = opfuse_clamp({x}, {lo}, {hi});")
            return name
        if op in LUT_OPS:
            qi = quant(node.inputs[0], node)
            ci = int_ctype(node.inputs[0], node)
            alpha = attr(node, "alpha")
            beta = attr(node, "beta")
            tab = table(op, self.mode, qi, qo, ci.lo, ci.hi,
                        None if alpha is None else float(alpha),
                        None if beta is None else float(beta))
            ptr = self.params.weight(f"{node.name}:lut", tab, INT32)
            w(f"const int32_t {name} = opfuse_clamp({ptr}[{x} - ({ci.lo})], {ct.lo}, {ct.hi});")
            return name
        s1, z1 = scale_zero(node, 0)
        s2, z2 = scale_zero(node, 1)
        so, zo = float(qo.scale[0]), int(qo.zero_point[0])
        y = args[1]
        if self.mode == ONNX:
            if op == "Mul":
                expr = (f"opfuse_requant_f(({x} - {z1}) * ({y} - {z2}), "
                        f"{flit(np.float32(s1) * np.float32(s2) / np.float32(so))})")
            else:
                s2c = flit(s2 if op == "Add" else -s2)
                expr = (f"opfuse_qadd_f({x} - {z1}, {flit(s1)}, {y} - {z2}, {s2c}, "
                        f"{flit(so)})")
        elif op == "Mul":
            m, s = quantize_multiplier(float(s1) * float(s2) / so)
            expr = f"opfuse_requant(({x} - {z1}) * ({y} - {z2}), {m}, {s})"
        else:
            p = add_params(s1, s2, so)
            sign = "+" if op == "Add" else "-"
            a = f"opfuse_requant(({x} - {z1}) * {1 << p['left_shift']}, {p['m1']}, {p['s1']})"
            b = f"opfuse_requant(({y} - {z2}) * {1 << p['left_shift']}, {p['m2']}, {p['s2']})"
            expr = f"opfuse_requant({a} {sign} {b}, {p['mo']}, {p['so']})"
        w(f"const int32_t {name} = opfuse_clamp({expr} + {zo}, {ct.lo}, {ct.hi});")
        return name


def clamp_span(nodes: Sequence[ir.Node], params: Params) -> tuple[int, int] | None:
    """The int8 range a chain of clamps only (Relu, Clip: the same quantization in and out)
    leaves after the anchor's own clamp to [-128, 127]; None for any other chain (a vector
    output stage can fold such a chain into its min and max)."""
    lo, hi = -128, 127
    for node in nodes:
        q = quant(node.outputs[0], node)
        if node.op_type not in CLAMP_OPS or quant(node.inputs[0], node) != q:
            return None
        a, b = clamp_bounds(node, q, int_ctype(node.outputs[0], node), rounding(params))
        lo, hi = max(lo, a), min(hi, b)
    return (lo, hi) if lo <= hi else None


def scale_zero(node: ir.Node, i: int) -> tuple[float, int]:
    q = quant(node.inputs[i], node, f"input {i}")
    if q.scale.size != 1:
        raise OpfuseError(f"C backend: {who(node)}: input {i} must be quantized per tensor")
    return float(q.scale[0]), int(q.zero_point[0])


def store_type(value: ir.Value, node: ir.Node) -> str:
    return int_ctype(value, node).name


def emit_elementwise8(w: CWriter, nodes: list[ir.Node], params: Params) -> None:
    """A standalone int8 elementwise chain over its last node's output; an Add or Sub of two
    whole int8 tensors (then clamps) goes through the ISA's vector kernel where it has one
    (``IsaKernels.elementwise_add``), this C in its ``#else``."""
    vector = _vector_add(w, nodes, params)
    if vector is not None:
        vector(lambda: _elementwise(w, nodes, params))
        return
    _elementwise(w, nodes, params)


def _vector_add(w: CWriter, nodes: list[ir.Node], params: Params):  # noqa: ANN202
    from opfuse.backends.c.isa import kernels

    kernel = kernels(params.store.isa).elementwise_add
    head, last = nodes[0], nodes[-1].outputs[0]
    if kernel is None or rounding(params) == ONNX or head.op_type not in ("Add", "Sub"):
        return None
    shape = dims(last, nodes[-1])
    ins = head.inputs
    if (len(ins) != 2 or any(v is None or const(v) is not None or dims(v, head) != shape
                             or int_ctype(v, head).name != "int8_t" for v in ins)
            or int_ctype(last, nodes[-1]).name != "int8_t"
            or int_ctype(head.outputs[0], head).name != "int8_t"):
        return None
    span = clamp_span(nodes[1:], params)
    if span is None:
        return None
    (s1, z1), (s2, z2) = scale_zero(head, 0), scale_zero(head, 1)
    qo = quant(head.outputs[0], head)
    x, y = (params.inp(v, head) for v in ins)
    return lambda scalar: kernel(
        w, n=int(np.prod(shape)), x=x, y=y,
        out=params.out(last, nodes[-1]), zx=z1, zy=z2,
        p=add_params(s1, s2, float(qo.scale[0])), sub=head.op_type == "Sub",
        zo=int(qo.zero_point[0]), lo=span[0], hi=span[1], scalar=scalar)


def _elementwise(w: CWriter, nodes: list[ir.Node], params: Params) -> None:
    last = nodes[-1].outputs[0]
    shape = dims(last, nodes[-1])
    chain = Chain8(nodes, shape, params, None)
    y = params.out(last, nodes[-1])
    coords = [f"i{d}" for d in range(len(shape))] or ["0"]
    for d, size in enumerate(shape):
        w.open(f"for (int i{d} = 0; i{d} < {size}; ++i{d})")
    from opfuse.backends.c.cgen import contiguous

    v = chain.emit(w, None, coords if shape else [])
    off = offset_expr(coords, contiguous(shape)) if shape else "0"
    w(f"{y}[{off}] = ({store_type(last, nodes[-1])}){v};")
    for _ in shape:
        w.close()
