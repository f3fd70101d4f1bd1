"""LSTM and GRU kernels (ONNX, float32): the whole sequence in one kernel function, one time step
a gate-major matrix-vector product (docs/architecture.md, "Recurrent kernels in C").

At generation time the weights of each direction are arranged as one matrix ``M`` of ``G*H`` gate
rows (G gates of H units, in ONNX's gate order: LSTM i, o, f, c; GRU z, r, h) over I input then H
recurrent columns, stored column by column (gate-major within a column), and one bias per row (the
input and recurrent biases summed; a GRU with ``linear_before_reset`` keeps its recurrent h-gate
bias apart, inside the reset product). A step is then ``g = b + M [x_t; h_{t-1}]``, four columns
at a time over all gate rows (``_accumulate``: contiguous rows gcc vectorizes), followed by the
gate arithmetic on H units.

The state (h, and an LSTM's c) lives where its final value is returned: in ``Y_h`` / ``Y_c`` in
the arena when the node has those outputs, else in a stack array of H floats; the gate sums
(G*H floats) are a stack array too (``OPFUSE_STACK_SCRATCH_BYTES`` counts them). Each step's h
is copied into ``Y`` when the node has it.

Covered: forward, reverse and bidirectional; layout 0 and 1; B, initial_h, initial_c and
peepholes (P) optional; ``sequence_lens`` (steps past a batch entry's length write zeros and an
empty sequence returns zero states, as onnxruntime does; a run-time one is clamped to [0, steps]);
``clip``; the activations Sigmoid, Tanh and Relu in any of the attribute's slots. Refused with one
line: ``input_forget`` and other activations.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims, flit, need_const, who
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError, Unsupported
from opfuse.ir.values import const
from opfuse.ops import groups
from opfuse.ops.table import RECURRENT

GATES = {"LSTM": 4, "GRU": 3}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}
# fastmath.py's branch-free functions: the unit loops vectorize (libm on a Cortex-M without MVE)
_ACT_C = {
    "Sigmoid": "opfuse_sigmoidf({v})",
    "Tanh": "opfuse_tanhf({v})",
    "Relu": "({v} > 0.0f ? {v} : 0.0f)",
}
RECURRENT_OPS = groups.c_float(RECURRENT)


def recurrent_geometry(node: ir.Node) -> tuple[int, int, int, int, int]:
    """(directions, steps, batch, input size, hidden size) of an LSTM or GRU node."""
    xs = dims(node.inputs[0], node)
    if len(xs) != 3:
        raise OpfuseError(f"C backend: {who(node)}: X must have rank 3, has {len(xs)}")
    layout = int(attr(node, "layout", 0))
    steps, batch = (xs[1], xs[0]) if layout else (xs[0], xs[1])
    ws = dims(node.inputs[1], node)
    gates = GATES[node.op_type]
    hidden = int(attr(node, "hidden_size", 0) or ws[1] // gates)
    return ws[0], steps, batch, xs[2], hidden


def _activations(node: ir.Node, directions: int) -> list[list[str]]:
    """Per direction the activation names (LSTM f, g, h; GRU f, g)."""
    default = _DEFAULT_ACTS[node.op_type]
    names = attr(node, "activations")
    if not names:
        return [default] * directions
    names = [str(n) for n in names]
    if len(names) != len(default) * directions:
        raise OpfuseError(f"{who(node)}: {len(names)} activations for {directions} direction(s); "
                          f"{len(default) * directions} expected")
    for name in names:
        if name not in _ACT_C:
            raise Unsupported(f"C backend: {who(node)}: activation {name} has no C kernel "
                              f"(covered: {', '.join(_ACT_C)})")
    n = len(default)
    return [names[d * n:(d + 1) * n] for d in range(directions)]


def _act(name: str, value: str) -> str:
    return _ACT_C[name].format(v=value)


def _optional(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if len(node.inputs) > index else None


def _output(node: ir.Node, index: int, params: Params) -> str | None:
    """The output ``index`` when the node has it and the plan stores it, else None."""
    value = node.outputs[index] if len(node.outputs) > index else None
    if value is None or not value.name or not params.store.is_arena(value):
        return None
    return params.out(value, node)


def _lengths(node: ir.Node, steps: int, batch: int) -> list[int] | None:
    """The constant sequence lengths, or None when they arrive at run time."""
    value = _optional(node, 4)
    if value is None:
        return [steps] * batch
    arr = const(value)
    if arr is None:
        return None
    lens = [int(v) for v in np.asarray(arr).reshape(-1)]
    if len(lens) != batch or any(n < 0 or n > steps for n in lens):
        raise OpfuseError(f"{who(node)}: sequence_lens {lens} does not fit {batch} batch entries "
                          f"of {steps} steps")
    return lens


def _arranged(node: ir.Node, directions: int, gates: int, size: int, hidden: int):
    """(M, bias, recurrent h-gate bias or None), M of (D, I+H, G*H) as the module docstring says."""
    w = need_const(node, 1, "W").astype(np.float32)
    r = need_const(node, 2, "R").astype(np.float32)
    rows = gates * hidden
    if w.shape != (directions, rows, size) or r.shape != (directions, rows, hidden):
        raise OpfuseError(f"{who(node)}: W {list(w.shape)} / R {list(r.shape)} do not match "
                          f"{directions} direction(s) of {gates} gates x {hidden} units over "
                          f"{size} inputs")
    matrix = np.ascontiguousarray(np.concatenate([w, r], axis=2).transpose(0, 2, 1))
    b = _optional(node, 3)
    both = (need_const(node, 3, "B").astype(np.float32).reshape(directions, 2 * rows)
            if b is not None else np.zeros((directions, 2 * rows), np.float32))
    wb, rb = both[:, :rows], both[:, rows:]
    split = node.op_type == "GRU" and int(attr(node, "linear_before_reset", 0))
    bias = wb + rb
    if split:  # the recurrent h-gate bias is multiplied by the reset gate: kept apart
        bias[:, 2 * hidden:] = wb[:, 2 * hidden:]
        return matrix, bias, np.ascontiguousarray(rb[:, 2 * hidden:])
    return matrix, bias, None


def emit_recurrent(w: CWriter, node: ir.Node, params: Params) -> None:
    """One LSTM or GRU node over its whole sequence (module docstring)."""
    op = node.op_type
    if op == "LSTM" and int(attr(node, "input_forget", 0)):
        raise Unsupported(f"C backend: {who(node)}: LSTM with input_forget=1 has no C kernel")
    directions, steps, batch, size, hidden = recurrent_geometry(node)
    direction = str(attr(node, "direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional") or \
            directions != (2 if direction == "bidirectional" else 1):
        raise OpfuseError(f"{who(node)}: direction '{direction}' with {directions} weight sets")
    layout = int(attr(node, "layout", 0))
    gates = GATES[op]
    rows, cols = gates * hidden, size + hidden
    acts = _activations(node, directions)
    lens = _lengths(node, steps, batch)
    matrix, bias, rbh = _arranged(node, directions, gates, size, hidden)
    clip = attr(node, "clip")
    x = params.inp(node.inputs[0], node)
    m = params.weight(f"{node.name}:gates", matrix)
    b = params.weight(f"{node.name}:bias", bias)
    rb = params.weight(f"{node.name}:rbias", rbh) if rbh is not None else None
    init_h = _optional(node, 5)
    h0 = params.inp(init_h, node) if init_h is not None else None
    init_c = _optional(node, 6) if op == "LSTM" else None
    c0 = params.inp(init_c, node) if init_c is not None else None
    peep = _optional(node, 7) if op == "LSTM" else None
    p = params.inp(peep, node) if peep is not None else None
    y, yh = _output(node, 0, params), _output(node, 1, params)
    yc = _output(node, 2, params) if op == "LSTM" else None
    # strides (in floats) of X's step and batch entry, and of the state's (direction, batch) row
    xt, xb = (size, steps * size) if layout else (batch * size, size)
    sd, sb = (hidden, directions * hidden) if layout else (batch * hidden, hidden)
    yt, yd, yb = ((directions * hidden, hidden, steps * directions * hidden) if layout
                  else (directions * batch * hidden, batch * hidden, hidden))
    w(f"/* {op}: {steps} steps x {batch} batch, {size} inputs -> {hidden} units, "
      f"{direction}, layout {layout} */")
    if lens is None:  # run-time lengths, clamped to the steps the arrays hold
        seq = params.inp(node.inputs[4], node)
        w(f"int lens[{batch}];")
        w(f"for (int n = 0; n < {batch}; ++n) lens[n] = {seq}[n] < 0 ? 0 : "
          f"{seq}[n] > {steps} ? {steps} : (int){seq}[n];")
    else:
        w(f"static const int lens[{batch}] = {{{', '.join(map(str, lens))}}};")
    if y is not None and (lens is None or any(n < steps for n in lens)):
        w(f"for (int i = 0; i < {steps * directions * batch * hidden}; ++i) {y}[i] = 0.0f;")
    w.open(f"for (int d = 0; d < {directions}; ++d)")
    w.open(f"for (int n = 0; n < {batch}; ++n)")
    w(f"float g[{rows}];")
    _state(w, "h", yh, h0, hidden, sd, sb)
    if op == "LSTM":
        _state(w, "c", yc, c0, hidden, sd, sb)
    if op == "GRU":
        w(f"float {'rh' if rbh is None else 'hr'}[{hidden}];")
    w(f"const float *md = {m} + d*{rows * cols};")
    w(f"const float *bd = {b} + d*{rows};")
    if rb is not None:
        w(f"const float *rbd = {rb} + d*{hidden};")
    reverse = "d == 1" if direction == "bidirectional" else ("1" if direction == "reverse" else "0")
    w.open("for (int s = 0; s < lens[n]; ++s)")
    w(f"const int t = ({reverse}) ? lens[n] - 1 - s : s;")
    w(f"const float *xt = {x} + t*{xt} + n*{xb};")
    w(f"for (int r = 0; r < {rows}; ++r) g[r] = bd[r];")
    _accumulate(w, "g[r]", 0, rows, 0, size, "xt", rows)
    hgate = 2 * hidden if op == "GRU" else rows  # GRU: z and r first, the h gate after them
    _accumulate(w, "g[r]", 0, hgate, size, hidden, "h", rows)
    if op == "LSTM":
        _lstm_update(w, hidden, acts, p, clip)
    else:
        _gru_update(w, hidden, size, rows, acts, rb, clip)
    if y is not None:
        w(f"for (int k = 0; k < {hidden}; ++k) {y}[t*{yt} + d*{yd} + n*{yb} + k] = h[k];")
    w.close()
    if lens is None or 0 in lens:  # an empty sequence returns zeros, not its initial state
        states = "h[k] = 0.0f; c[k] = 0.0f;" if op == "LSTM" else "h[k] = 0.0f;"
        w(f"if (lens[n] == 0) for (int k = 0; k < {hidden}; ++k) {{ {states} }}")
    w.close()
    w.close()


def _state(w: CWriter, name: str, out: str | None, init: str | None, hidden: int,
           sd: int, sb: int) -> None:
    """Declare state ``name``: a pointer into its output row, or a stack array; set it."""
    row = f"d*{sd} + n*{sb}"
    if out is not None:
        w(f"float *{name} = {out} + {row};")
    else:
        w(f"float {name}[{hidden}];")
    value = f"{init}[{row} + k]" if init is not None else "0.0f"
    w(f"for (int k = 0; k < {hidden}; ++k) {name}[k] = {value};")


def _accumulate(w: CWriter, target: str, first: int, last: int, k0: int, count: int,
                vector: str, rows: int) -> None:
    """``target`` (an expression of gate row r) += M[k0 + k][r] * vector[k] for rows first..last:
    four columns at a time, so the row loop is independent lanes gcc vectorizes without
    reassociating a sum, and each row's sum is loaded and stored once per four products."""
    quads = count // _COLUMNS * _COLUMNS
    if quads:
        w.open(f"for (int k = 0; k < {quads}; k += {_COLUMNS})")
        w(f"const float *mk = md + ({k0} + k)*{rows};")
        w(f"const float {', '.join(f'v{j} = {vector}[k + {j}]' for j in range(_COLUMNS))};")
        terms = " + ".join(f"mk[{j * rows} + r] * v{j}" for j in range(_COLUMNS))
        w(f"for (int r = {first}; r < {last}; ++r) {target} += {terms};")
        w.close()
    if count > quads:
        w.open(f"for (int k = {quads}; k < {count}; ++k)")
        w(f"const float v = {vector}[k];")
        w(f"const float *mk = md + ({k0} + k)*{rows};")
        w(f"for (int r = {first}; r < {last}; ++r) {target} += mk[r] * v;")
        w.close()


_COLUMNS = 4  # matrix columns per pass over the gate sums


def _clipped(value: str, clip: float | None) -> str:
    if clip is None:
        return value
    c = flit(float(clip))
    return f"fminf(fmaxf({value}, -{c}), {c})"


def _lstm_update(w: CWriter, hidden: int, acts: list[list[str]], p: str | None,
                 clip: float | None) -> None:
    """ONNX's LSTM equations on the gate sums (i, o, f, c order), per direction's activations."""
    w.open(f"for (int k = 0; k < {hidden}; ++k)")
    pi, po, pf = ((f"{p}[d*{3 * hidden} + k]", f"{p}[d*{3 * hidden} + {hidden} + k]",
                   f"{p}[d*{3 * hidden} + {2 * hidden} + k]") if p is not None else (None,) * 3)
    # the peepholes are added before the clip, as onnxruntime clips
    i_sum = _clipped(f"g[k] + {pi} * c[k]" if pi else "g[k]", clip)
    f_sum = _clipped(f"g[{2 * hidden} + k] + {pf} * c[k]" if pf else f"g[{2 * hidden} + k]", clip)
    _per_direction(w, "const float i", acts, 0, i_sum)
    _per_direction(w, "const float f", acts, 0, f_sum)
    _per_direction(w, "const float z", acts, 1, _clipped(f"g[{3 * hidden} + k]", clip))
    w("c[k] = f * c[k] + i * z;")
    o_sum = _clipped(f"g[{hidden} + k] + {po} * c[k]" if po else f"g[{hidden} + k]", clip)
    _per_direction(w, "const float o", acts, 0, o_sum)
    _per_direction(w, "float hc", acts, 2, "c[k]")
    w("h[k] = o * hc;")
    w.close()


def _gru_update(w: CWriter, hidden: int, size: int, rows: int, acts: list[list[str]],
                rb: str | None, clip: float | None) -> None:
    """ONNX's GRU equations: z and r from the first 2H sums (clipped before their activation),
    then the h gate."""
    h2 = 2 * hidden
    w.open(f"for (int k = 0; k < {hidden}; ++k)")
    _per_direction(w, "g[k]", acts, 0, _clipped("g[k]", clip))
    _per_direction(w, f"g[{hidden} + k]", acts, 0, _clipped(f"g[{hidden} + k]", clip))
    if rb is None:  # linear_before_reset = 0: the h gate reads r (.) h
        w(f"rh[k] = g[{hidden} + k] * h[k];")
        w.close()
        _accumulate(w, "g[r]", h2, rows, size, hidden, "rh", rows)
        w.open(f"for (int k = 0; k < {hidden}; ++k)")
        _per_direction(w, "const float n", acts, 1, _clipped(f"g[{h2} + k]", clip))
    else:  # linear_before_reset = 1: h gate = g(Wx + Wb + r (.) (R h + Rb))
        w("hr[k] = rbd[k];")
        w.close()
        _accumulate(w, f"hr[r - {h2}]", h2, rows, size, hidden, "h", rows)
        w.open(f"for (int k = 0; k < {hidden}; ++k)")
        pre = _clipped(f"g[{h2} + k] + g[{hidden} + k] * hr[k]", clip)
        _per_direction(w, "const float n", acts, 1, pre)
    w("h[k] = (1.0f - g[k]) * n + g[k] * h[k];")
    w.close()


def _per_direction(w: CWriter, target: str, acts: list[list[str]], slot: int, value: str) -> None:
    """``target = act(value)`` with the activation of ``slot``: one expression when every
    direction uses the same one, else chosen by ``d``."""
    names = [a[slot] for a in acts]
    if len(set(names)) == 1:
        w(f"{target} = {_act(names[0], value)};")
        return
    w(f"{target} = d == 0 ? {_act(names[0], value)} : {_act(names[1], value)};")
