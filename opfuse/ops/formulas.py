"""MAC and FLOP formulas of the op registry (docs/architecture.md, "Op registry").

Formulas read static shapes from the node's values (the frontend makes every shape static before
any stage looks here); a dim nobody knows counts 0 rather than an invented size.
"""

from __future__ import annotations

import math

import onnx_ir as ir


def numel(value: ir.Value | None) -> int:
    if value is None or value.shape is None:
        return 0
    n = 1
    for d in value.shape:
        n *= d if isinstance(d, int) else 1
    return n


def static(dim: object) -> int:
    """A dim's size, or 0 when it is not known (a custom op's output of unknown shape): MACs over
    an unknown size are not counted rather than invented (analyze says its totals are bounds)."""
    return dim if isinstance(dim, int) else 0


def out_elems(node: ir.Node) -> int:
    return numel(node.outputs[0])


def in_elems(node: ir.Node) -> int:
    return numel(node.inputs[0]) if node.inputs else 0


def conv_macs(node: ir.Node) -> int:
    w = node.inputs[1]
    if w is None or w.shape is None:
        return 0
    kernel = math.prod(static(d) for d in w.shape[2:]) if len(w.shape) > 2 else 1
    # Conv weight is (Cout, Cin/group, k...): every output element sums Cin/group * k products.
    return out_elems(node) * static(w.shape[1]) * kernel


def conv_transpose_macs(node: ir.Node) -> int:
    w = node.inputs[1]
    if w is None or w.shape is None:
        return 0
    kernel = math.prod(static(d) for d in w.shape[2:]) if len(w.shape) > 2 else 1
    # ConvTranspose weight is (Cin, Cout/group, k...): every input element scatters into
    # Cout/group * k outputs.
    return in_elems(node) * static(w.shape[1]) * kernel


def matmul_macs(node: ir.Node) -> int:
    a = node.inputs[0]
    if a is None or a.shape is None or len(a.shape) == 0:
        return 0
    k = static(a.shape[-1])
    if node.op_type == "Gemm":
        trans_a = node.attributes.get("transA")
        if trans_a is not None and trans_a.as_int():
            k = static(a.shape[0])
    return out_elems(node) * k


def window(node: ir.Node) -> int:
    ks = node.attributes.get("kernel_shape")
    return math.prod(ks.as_ints()) if ks is not None else 1


def zero(node: ir.Node) -> int:
    return 0


def _recurrent_units(node: ir.Node) -> tuple[int, int, int]:
    """(steps x batch x directions, gate rows G*H, hidden H) of an LSTM or GRU: W is (D, G*H, I),
    R is (D, G*H, H)."""
    x = node.inputs[0]
    r = node.inputs[2] if len(node.inputs) > 2 else None
    if x is None or x.shape is None or len(x.shape) != 3 or r is None or r.shape is None \
            or len(r.shape) != 3:
        return 0, 0, 0
    runs = static(x.shape[0]) * static(x.shape[1]) * static(r.shape[0])
    return runs, static(r.shape[1]), static(r.shape[2])


def recurrent_macs(node: ir.Node) -> int:
    """Per step and direction, every gate row reads the input and the previous state:
    ``G*H * (I + H)`` products."""
    x = node.inputs[0]
    runs, rows, hidden = _recurrent_units(node)
    size = static(x.shape[-1]) if runs else 0
    return runs * rows * (size + hidden)


# FLOPs per unit and step besides the products (ONNX's equations): one bias add per gate (Wb + Rb
# summed once), each activation counted as 4 (as Sigmoid and Tanh are in the table), and the state:
# LSTM C = f*C + i*c, H = o*h(C) (4); GRU r*H, (1 - z)*h + z*H (5)
_UNIT_FLOPS = {"LSTM": 4 + 5 * 4 + 4, "GRU": 3 + 3 * 4 + 5}


def recurrent_flops(node: ir.Node) -> int:
    runs, _, hidden = _recurrent_units(node)
    return runs * hidden * _UNIT_FLOPS.get(node.op_type, 0)
