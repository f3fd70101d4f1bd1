"""A cascaded kernel in C (float32 and int8): its members run band by band through ring buffers in
the arena.

The schedule is ``opfuse.fusion.rings.band_schedule``: a static table of ``(member, first row,
last row)`` steps, the last member's bands each preceded by the rows its producers must compute
first. A ring of ``R`` rows of a ``C x H x W`` value is laid out ``C x R x W``: row ``y`` of channel
``c`` sits at ``(c*R + y % R)*W``; a whole tensor is the case ``R = H``. The chain input, the
output and any residual operand are whole arena tensors; the rings are the plan's ``ring:`` tensors.

A member is a Conv (any group, kernel, stride, dilation and padding) or an elementwise op first,
then elementwise epilogues: Relu, Clip, one-input activations (``_UNARY``), and
Add/Sub/Mul/Div/Sum-of-two of a constant (scalar or per channel) or of a whole arena tensor of the
output's shape (a residual) or broadcast to it (a 1 x C x 1 x 1 scale). ``_member`` is the one place a
member is dispatched by its op: a depthwise conv goes to the layer-by-layer band core
(``dwconv.py``) through the row-source interface (``rowsource.py``: the input rows from a ring or
the whole tensor, the output into a ring), any other conv by its plan (kernelplan/convf.py): on a
scalar FPU the layer-by-layer pixel tiles (``pixeltiles.py``) on the rings, on a vector unit the
register-tiled row kernels (``cascade_rows.py``), or, when their line buffer would exceed
``convf.LINE_FLOATS``, the layer-by-layer direct core (``convdirect.py``), all through the same
interface; the epilogue is
fused into the store as C statements on a scalar (``scalar_epilogue``); an elementwise first op
runs one row in memory. Whether cascaded
C beats the layer-by-layer templates depends on the model (benchmarks/c_backend.py); ``emit_c``
streams the partition's cascades by default.
A MaxPool / AveragePool may lead a member too (its row window, padding, dilation and
count_include_pad as the layer-by-layer pool: ``cascade_pool.py``, through ``pools.emit_pool_row``).
A member on int8 / uint8 activations (``is_int8_member``) is written by ``int8/cascade.py``: its
rings hold one byte per element, and the conv and pool row cores, the per-channel
requantization and the int8 epilogue (a residual Add with its own requantization...) are the
layer-by-layer int8 kernels' own, so it is bit-exact with them and with TFLite Micro, in either
rounding mode.
``why_not_member`` says whether a member kernel is within that; the partitioner consults it
(``support.py``), so every cascade of a partition is one this module writes.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c import cascade_rows as rows
from opfuse.backends.c.cascade_bands import open_pulled, open_table, pulled_schedule
from opfuse.backends.c.cascade_pool import POOLS, pool_row, why_not_pool
from opfuse.backends.c.cgen import CWriter, attr, flit
from opfuse.backends.c.conv import conv_geom
from opfuse.backends.c.convdirect import emit_direct_rows, pack_weights
from opfuse.backends.c.dwconv import emit_depthwise_rows, isa_rows, zero_row
from opfuse.backends.c.epilogue import clamps, scalar_expr
from opfuse.backends.c.int8.cascade import emit_member8, is_int8_member, why_not_member8
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.pixeltiles import emit_pixel_conv
from opfuse.backends.c.rowsource import RowSink, RowSource, ring_offset
from opfuse.backends.c.tensors import Params
from opfuse.fusion.rings import Window, band_schedule
from opfuse.fusion.stages import WINDOWED, chain_input, window_of
from opfuse.fusion.views import nhwc_view
from opfuse.ir.values import const, static_dims
from opfuse.kernelplan import convf
from opfuse.memory.lifetimes import RING_PREFIX
from opfuse.ops import groups
from opfuse.schedule import Kernel

_EPILOGUE = groups.C_CASCADE  # what a member streams after its first op (the op registry's)
# Sum: the variadic add of old opsets (ResNet's residual joins before opset 8's Add broadcast)
_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Sum": "+"}
# one-input activations, written by the layer-by-layer epilogue's scalar expressions
_UNARY = _EPILOGUE - groups.CLAMPS - _BINARY.keys()


def why_not_member(ms: list[ir.Node]) -> str | None:
    """None when ``_member`` can stream the member kernel ``ms``, else why not (naming its node);
    the partitioner consults it through ``opfuse/backends/c/support.py``."""
    if is_int8_member(ms):  # int8 members: opfuse/backends/c/int8/cascade.py
        return why_not_member8(ms)
    for i, node in enumerate(ms):
        why = _why_not_node(node, i)
        if why is not None:
            return f"{node.name} ({node.op_type}): {why}"
    for node in ms:
        for v in (*node.inputs, *node.outputs):
            if v is not None and v.dtype is not None and v.dtype != ir.DataType.FLOAT:
                if const(v) is None:
                    return f"{node.name} ({node.op_type}): {v.dtype.name} activations"
    return None


def _why_not_node(node: ir.Node, index: int) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return f"domain {node.domain}"
    if node.op_type == "Conv" and index == 0:
        if len(static_dims(node.inputs[1]) or ()) != 4 or const(node.inputs[1]) is None:
            return "not a 2-D conv with constant weights"
        if len(node.inputs) > 2 and node.inputs[2] is not None and const(node.inputs[2]) is None:
            return "a bias that is not constant"
        if (attr(node, "auto_pad", "NOTSET") or "NOTSET") not in ("NOTSET", "VALID"):
            return "auto_pad SAME (canonicalization writes explicit pads)"
        return None
    if node.op_type in POOLS and index == 0:  # opfuse/backends/c/cascade_pool.py
        return why_not_pool(node)
    if node.op_type not in _EPILOGUE:
        return "no row kernel for this op in cascaded C"
    if node.op_type == "Clip" and any(v is not None and const(v) is None for v in node.inputs[1:]):
        return "bounds that are not constant"
    if node.op_type in _UNARY and len([v for v in node.inputs if v is not None]) != 1:
        return "an activation with more than one input"
    if node.op_type == "Sum" and len(node.inputs) != 2:
        return f"a Sum of {len(node.inputs)} operands (the row kernel adds two)"
    if node.op_type in _BINARY:
        return _why_not_operands(node)
    return None


def _why_not_operands(node: ir.Node) -> str | None:
    """What ``_operand`` cannot index: the row kernel reads a constant per channel (or a scalar)
    and any other operand whole, at the output's shape or broadcast to it dim by dim."""
    a, b = node.inputs[0], node.inputs[1]
    if a is b:
        return "both operands are the same value"
    out = static_dims(node.outputs[0])
    for v in (a, b):
        arr = const(v)
        if arr is None:
            shape = static_dims(v)
            if shape is None or out is None or len(shape) != len(out) or any(
                d not in (1, o) for d, o in zip(shape, out, strict=True)
            ):
                return f"operand '{v.name}' does not broadcast to the output dim by dim"
        elif np.asarray(arr).size > 1 and out is not None and len(out) == 4:
            try:
                full = np.broadcast_to(np.asarray(arr), out)[0]
            except ValueError:
                return f"constant '{v.name}' does not broadcast to the output"
            if not (full == full[:, :1, :1]).all():
                return f"constant '{v.name}' varies across rows or columns"
    return None


class _Stores:
    """Pointer name and rows kept (R) of every value a cascade touches."""

    def __init__(self, kernel: Kernel, nodes: dict, params: Params) -> None:
        self.params = params
        self.plan = params.store.plan
        self.rings = {r.value: r.rows for r in kernel.ring_buffers}
        self.nodes = nodes

    def ptr(self, value: ir.Value, node: ir.Node, write: bool = False) -> str:
        if value.name in self.rings:
            offset = self.plan.offsets[RING_PREFIX + value.name] // 4
            restrict = self.params.restrict
            return self.params._add("ring:" + value.name, f"float *{restrict} {{name}}",
                                    f"A + {offset}")  # fmt: skip
        return self.params.out(value, node) if write else self.params.inp(value, node)

    def rows(self, value: ir.Value) -> int:
        return self.rings.get(value.name, static_dims(value)[2])


def emit_cascade(w: CWriter, kernel: Kernel, nodes: dict[str, ir.Node], params: Params) -> None:
    """The body of the cascade's C function (see the module docstring)."""
    stores = _Stores(kernel, nodes, params)
    members, owners = _joined([[nodes[n] for n in m.nodes] for m in kernel.members], kernel)
    first_in = chain_input(kernel.members[0], nodes)
    values = [first_in] + [ms[-1].outputs[0] for ms in members]
    windows = [window_of(ms[0]) if ms[0].op_type in WINDOWED else Window() for ms in members]
    heights = [static_dims(v)[2] for v in values]
    steps = band_schedule(windows, heights, kernel.band_rows)
    if pulled_schedule(windows, heights, kernel.band_rows) == steps:
        open_pulled(w, windows, heights, kernel.band_rows)
    else:  # no shape we know of comes here: the table is right by construction
        open_table(w, steps)
    for index, ms in enumerate(members):
        w.open(f"case {index}:")
        stores.member = owners[index]  # names a member written as its own function
        most = max((b - a + 1 for s, a, b in steps if s == index), default=1)
        _member(w, ms, values[index], values[index + 1], stores, most)
        w("break;")
        w.close()
    w("default: break;")
    w.close()
    w.close()
    w.close()


def _joined(members: list[list[ir.Node]], kernel: Kernel) -> tuple[list[list[ir.Node]], list]:
    """The members as written: an int8 member led by an elementwise op (ResNet's residual Add +
    Relu after a conv) joins the member before it as more of its epilogue, so its rows are stored
    once, not read back from a ring of one row (its ring stays in the plan, unused). The int8
    epilogue computes each op's own integers (int8/chain.py), so the result is the same; a
    member's code fewer (ResNet-8: three)."""
    out: list[list[ir.Node]] = []
    owners: list = []
    for ms, owner in zip(members, kernel.members, strict=True):
        if out and ms[0].op_type not in WINDOWED and is_int8_member(ms) \
                and is_int8_member(out[-1]):
            out[-1] = out[-1] + ms
            continue
        out.append(ms)
        owners.append(owner)
    return out, owners


def _member(w: CWriter, ms: list[ir.Node], x: ir.Value, y: ir.Value, stores: _Stores,
            most: int) -> None:
    """Rows ``a .. b`` (at most ``most``) of one member: the one place a member is dispatched by
    its first op."""
    view = nhwc_view(ms)  # the first member may read an NHWC graph input in place
    if view is not None:
        ms = ms[1:]
    if is_int8_member(ms):  # opfuse/backends/c/int8/cascade.py
        emit_member8(w, ms, x, y, stores, view)
        return
    head = ms[0]
    if head.op_type == "Conv" and _as_function(stores, head, x, y):
        _conv_function(w, ms, x, y, stores, most)
        return
    _, c_in, h_in, w_in = static_dims(x)
    _, c_out, _, w_out = static_dims(y)
    if view is not None:  # support.why_not_stream: the scalar FPU's pixel tiles read NHWC rows
        src = RowSource.nhwc(stores.params.inp(view.inputs[0], view), c_in, h_in, w_in)
        yp, ry = stores.ptr(y, ms[-1], write=True), stores.rows(y)
        _conv(w, ms, src, RowSource.of(yp, c_out, static_dims(y)[2], w_out, ry), stores, most)
        return
    xp, yp = stores.ptr(x, ms[0]), stores.ptr(y, ms[-1], write=True)
    rx, ry = stores.rows(x), stores.rows(y)
    if head.op_type == "Conv":  # the layer-by-layer conv cores (dwconv.py, convdirect.py)
        _conv(w, ms, RowSource.of(xp, c_in, h_in, w_in, rx),
              RowSource.of(yp, c_out, static_dims(y)[2], w_out, ry), stores, most)
        return
    w.open("for (int r = a; r <= b; ++r)")
    w.open(f"for (int c = 0; c < {c_out}; ++c)")
    w(f"float acc[{w_out}];")
    if head.op_type in POOLS:  # opfuse/backends/c/cascade_pool.py
        pool_row(w, head, xp, rx)
        current, rest = head.outputs[0], ms[1:]
    else:
        current, rest = x, ms
        w(f"for (int i = 0; i < {w_out}; ++i) acc[i] = {xp}[{ring_offset('c', 'r', rx, w_in)} + i];")
    lines = scalar_epilogue(rest, current, stores)
    w.open(f"for (int i = 0; i < {w_out}; ++i)")
    w("float v = acc[i];")
    for line in lines:
        w(line)
    w(f"{yp}[{ring_offset('c', 'r', ry, w_out)} + i] = v;")
    w.close()
    w.close()
    w.close()


def _as_function(stores: _Stores, head: ir.Node, x: ir.Value, y: ir.Value) -> bool:
    """Whether a float depthwise member is a function of its own: where the ISA says its cores
    keep their taps and vectors in registers only there (``IsaKernels.member_functions``), for a
    member reading or writing a ring. Inline in the band loop's switch, with every member's
    pointers live, gcc 12.2 spilled a depthwise member's taps to the stack (cortex-m55): as
    functions, mobilenet_v2_128_0.5's seven depthwise members ran 2,774,634 instructions where
    inline they ran 2,900,304 (both row by row, isa/mve/floatdw.py). Its pointwise members and
    pretrainedResnet's 3x3 convs ran more instructions as functions (+0.5-0.7%), so they stay inline."""
    return ("float" in kernels(stores.params.store.isa).member_functions
            and getattr(stores.params.store, "member_functions", None) is not None
            and getattr(stores, "member", None) is not None
            and (x.name in stores.rings or y.name in stores.rings)
            and conv_geom(head).icg == 1 and conv_geom(head).ocg == 1)


class _FunctionStores(_Stores):
    """A cascade's stores seen from a member's own function: its parameters, the same rings."""

    def __init__(self, stores: _Stores, params: Params) -> None:  # noqa: D107
        self.params, self.plan, self.rings, self.nodes = params, stores.plan, stores.rings, \
            stores.nodes


def _conv_function(w: CWriter, ms: list[ir.Node], x: ir.Value, y: ir.Value, stores: _Stores,
                   most: int) -> None:
    """The depthwise member as a call of its own function (its rows ``a``, ``b`` and pointers as
    arguments), defined once for every member of the same code (kernel_functions.py)."""
    funcs, defined, _ = stores.params.store.member_functions
    params = Params(stores.params.store, restrict=bool(stores.params.restrict))
    inner = _FunctionStores(stores, params)
    body = CWriter(1)
    first, last = params._add("row:a", "int {name}", "a"), params._add("row:b", "int {name}", "b")
    body(f"const int a = {first}, b = {last};")
    _, c_in, h_in, w_in = static_dims(x)
    _, c_out, h_out, w_out = static_dims(y)
    src = RowSource.of(inner.ptr(x, ms[0]), c_in, h_in, w_in, inner.rows(x))
    dst = RowSource.of(inner.ptr(y, ms[-1], write=True), c_out, h_out, w_out, inner.rows(y))
    _conv(body, ms, src, dst, inner, most)
    fname = defined.define(funcs, len(defined.bodies), stores.member, params, body.lines)
    w(params.call(fname))


def _conv(w: CWriter, ms: list[ir.Node], src: RowSource, dst: RowSource, stores: _Stores,
          most: int) -> None:
    """A conv member through the layer-by-layer cores: the same packed weights, tiles and bands,
    reading rows from ``src`` and storing through the member's epilogue into ``dst``."""
    head, params = ms[0], stores.params
    g = conv_geom(head)
    conv_float = kernels(params.store.isa).conv_float  # the ISA's, the C below in its #else
    if conv_float is None or not conv_float(
            w, head, g, ms[1:], params, src, dst, ("a", "b"),
            lambda w: _conv_rows(w, ms, g, src, dst, stores, most)):
        _conv_rows(w, ms, g, src, dst, stores, most)


def _conv_rows(w: CWriter, ms: list[ir.Node], g, src: RowSource, dst: RowSource,  # noqa: ANN001
               stores: _Stores, most: int) -> None:
    head, params = ms[0], stores.params
    sink = RowSink(dst, tuple(scalar_epilogue(ms[1:], head.outputs[0], stores)))
    plan = convf.plan_convf(g, params.store.isa.scalar, member=True,
                            fma=kernels(params.store.isa).fma_tile is not None)
    if plan.path == "pixels":  # a scalar FPU: the layer-by-layer pixel tiles on the rings
        emit_pixel_conv(w, head, g, plan, src, dst, ("a", "b"), params, list(sink.epilogue))
        return
    if plan.path in ("columns", "channels"):
        # column / channel tiles over the ring (measured faster here than the direct core)
        rows.emit_tiled(w, head, g, plan, src, dst, list(sink.epilogue), params)
        return
    bias = head.inputs[2] if len(head.inputs) > 2 and head.inputs[2] is not None else None
    b = params.weight(bias.name, const(bias).astype(np.float32).ravel()) \
        if bias is not None else None
    weight = const(head.inputs[1]).astype(np.float32)
    if plan.path == "depthwise":
        wt = params.weight(head.inputs[1].name, weight)
        vectors = isa_rows(params, g)
        emit_depthwise_rows(w, g, src, wt, b, sink, most, zero_row(params, g),
                            None if vectors is None else (*vectors, clamps(ms[1:])))
        return
    packed, meta = pack_weights(weight.reshape(g.oc, g.icg, g.k[0], g.k[1]), g.group)
    emit_direct_rows(w, g, src, params.weight(f"{head.inputs[1].name}:direct", packed), meta, b,
                     sink, kernels(params.store.isa).fma_tile)


def scalar_epilogue(nodes: list[ir.Node], current: ir.Value, stores: _Stores) -> list[str]:
    """C statements applying the elementwise ``nodes`` to the scalar ``v`` of channel ``c``, row
    ``r``, column ``i`` (``current`` is the value ``v`` holds before the first)."""
    lines = []
    for node in nodes:
        if node.op_type in _UNARY:  # the layer-by-layer epilogue's expression
            lines.append(f"v = {scalar_expr(node, ['v'])};")
        elif node.op_type == "Relu":
            lines.append("v = v > 0.0f ? v : 0.0f;")
        elif node.op_type == "Clip":
            lo = _scalar(node, 1, attr(node, "min", None))
            hi = _scalar(node, 2, attr(node, "max", None))
            if lo is not None:
                lines.append(f"v = v < {flit(lo)} ? {flit(lo)} : v;")
            if hi is not None:
                lines.append(f"v = v > {flit(hi)} ? {flit(hi)} : v;")
        else:
            sym = _BINARY[node.op_type]
            ours = 0 if node.inputs[0] is current else 1
            term = _operand(node, node.inputs[1 - ours], stores)
            lines.append(f"v = v {sym} {term};" if ours == 0 else f"v = {term} {sym} v;")
        current = node.outputs[0]
    return lines


def _scalar(node: ir.Node, index: int, default) -> float | None:  # noqa: ANN001
    if index < len(node.inputs) and node.inputs[index] is not None:
        return float(np.asarray(const(node.inputs[index])).reshape(-1)[0])
    return None if default is None else float(default)


def _operand(node: ir.Node, value: ir.Value, stores: _Stores) -> str:
    arr = const(value)
    out = static_dims(node.outputs[0])
    if arr is not None:
        arr = np.asarray(arr, np.float32)
        if arr.size == 1:
            return flit(float(arr.reshape(-1)[0]))
        full = np.broadcast_to(arr, out)[0]  # (C, H, W)
        if (full == full[:, :1, :1]).all():  # per channel
            p = stores.params.weight(value.name + "#c", np.ascontiguousarray(full[:, 0, 0]))
            return f"{p}[c]"
        raise NotImplementedError(f"{node.name}: a constant varying across rows")
    # a whole arena tensor: of the output's shape (a residual), or broadcast along some dims
    # (a squeeze-excite scale, 1 x C x 1 x 1): a dim of 1 is not indexed
    _, c, h, wd = static_dims(value)
    p = stores.ptr(value, node)
    index = f"({'c' if c > 1 else '0'}*{h} + {'r' if h > 1 else '0'})*{wd} + {'i' if wd > 1 else '0'}"
    return f"{p}[{index}]"
