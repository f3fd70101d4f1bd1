"""int8 members of a cascaded kernel (opfuse/backends/c/cascade.py: the schedule, the ring layout).

A member computes output rows ``a .. b`` of its value, row by row, from the rows of its input that
the schedule has kept in a ring (``C x R x W``, row ``y`` of channel ``c`` at ``(c*R + y % R)*W``,
one byte per element). Its first node is

* a Conv: the layer-by-layer int8 conv's nests (opfuse/backends/c/int8/conv.py): on Cortex-M the
  matrix core's rows; a depthwise conv's row; else pointwise.py's tiles over a line buffer of its
  ring rows or the rows themselves (``row_tiles.emit_member_rows8``): column tiles, or on short
  rows (the plan's ``conv_lanes``) channel tiles, with the same folded bias, ``Int8Sums`` and
  per-channel requantization, zero point and clamp;
* a MaxPool / AveragePool: ``emit_pool_value8`` of the layer-by-layer int8 pool, per output pixel;
* or an elementwise op of the int8 chain (the member's input row is its value);

then the int8 epilogue (``Chain8``: Relu / Clip, a residual Add / Sub / Mul with its own
requantization, table ops) on each output integer. So a cascade computes the very integers the
layer-by-layer kernels do, in either rounding mode (docs/architecture.md, "int8 in the IR").
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.conv import conv_geom
from opfuse.backends.c.ctype import ctype_of
from opfuse.backends.c.int8 import conv_mcu
from opfuse.backends.c.int8.chain import CHAIN_OPS, Chain8
from opfuse.backends.c.int8.common import bias_array, int_ctype, quant, requant_arrays, rounding
from opfuse.backends.c.int8.conv import packed_weights
from opfuse.backends.c.int8.depthwise_dsp import emit_depthwise_member
from opfuse.backends.c.int8.plan import conv8_plan, is_depthwise8
from opfuse.backends.c.int8.pointwise import Int8Sums, folded_bias, pairs_fit_int16
from opfuse.backends.c.int8.pools import emit_pool_value8
from opfuse.backends.c.int8.row_tiles import emit_member_rows8
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.pools import pool_geom
from opfuse.backends.c.rowsource import RowSource, channel_row, ring_row
from opfuse.ir.values import const
from opfuse.memory.lifetimes import RING_PREFIX
from opfuse.ops import groups
from opfuse.quant import conv_scales, get_quant

POOLS = groups.POOLS


def is_int8_member(ms: list[ir.Node]) -> bool:
    """Whether a member computes on 8-bit integers (its first node reads or writes one)."""
    head = ms[0]
    for v in (*head.inputs[:1], *head.outputs[:1]):
        ct = ctype_of(v) if v is not None else None
        if ct is not None and ct.size == 1 and not ct.is_float:
            return True
    return False


def why_not_member8(ms: list[ir.Node]) -> str | None:
    """None when ``emit_member8`` can write the member, else why not (naming its node)."""
    head = ms[0]
    for i, node in enumerate(ms):
        why = _why_not8(node, i)
        if why is not None:
            return f"{node.name} ({node.op_type}): {why}"
    for node in ms:
        for v in (*node.inputs, *node.outputs):
            if v is None or const(v) is not None:
                continue
            ct = ctype_of(v)
            if ct is None or ct.is_float or ct.size != 1:
                return f"{node.name} ({node.op_type}): '{v.name}' is not an int8/uint8 activation"
            q = get_quant(v)
            if q is None or q.scale.size != 1:
                return f"{node.name} ({node.op_type}): '{v.name}' is not quantized per tensor"
    if head.op_type == "MaxPool" and get_quant(head.inputs[0]) != get_quant(head.outputs[0]):
        return f"{head.name} (MaxPool): its input and output are quantized differently"
    return None


def _why_not8(node: ir.Node, index: int) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return f"domain {node.domain}"
    if index == 0 and node.op_type == "Conv":
        weight = const(node.inputs[1])
        if weight is None or weight.ndim != 4:
            return "not a 2-D conv with constant weights"
        wq = get_quant(node.inputs[1])
        if wq is None or np.any(wq.zero_point):
            return "weights without quantization parameters or with a nonzero zero point"
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            bias = const(node.inputs[2])
            if bias is None or bias.dtype.kind not in "iu":
                return "a bias that is not a constant int32"
        return None
    if index == 0 and node.op_type in POOLS:
        return None
    if node.op_type not in CHAIN_OPS:
        return "no int8 row kernel for this op in cascaded C"
    return None


def _ptr(stores, value: ir.Value, node: ir.Node, write: bool = False) -> str:  # noqa: ANN001
    """The C pointer of a value a cascade touches: its ring (one byte per element, at the plan's
    byte offset) or its whole arena tensor."""
    params = stores.params
    if value.name in stores.rings:
        ct = int_ctype(value, node)
        offset = stores.plan.offsets[RING_PREFIX + value.name]
        return params._add("ring:" + value.name, f"{ct.name} *{params.restrict} {{name}}",
                           f"({ct.name} *)(AB + {offset})")
    return params.out(value, node) if write else params.inp(value, node)


def emit_member8(w: CWriter, ms: list[ir.Node], x: ir.Value, y: ir.Value,
                 stores, view: ir.Node | None = None) -> None:  # noqa: ANN001
    """Rows ``a .. b`` (C variables of the step) of member ``ms`` from ``x`` into ``y``;
    ``view``: the NHWC -> NCHW Transpose of a graph input the first member's conv reads in
    place (``x`` is then its NCHW output, never written; fusion/views.py)."""
    functions = getattr(stores.params.store, "member_functions", None)
    if functions is not None and getattr(stores, "member", None) is not None and (
            _shareable(ms, x, y, stores, functions[2]) if view is None
            else "int8" in kernels(stores.params.store.isa).member_functions):
        _emit_function(w, ms, x, y, stores, functions, view)
        return
    _emit_rows(w, ms, x, y, stores, stores.rows(x), stores.rows(y), view)


def shape_twins(kernels, nodes: dict[str, ir.Node]) -> frozenset:  # noqa: ANN001
    """The shapes (``_shape``) of int8 conv members that more than one member of the schedule
    has: only those are written as functions, so a member of a shape of its own keeps its rows
    as constants (runtime rows cost MobileNetV3's cascades about 1% more instructions)."""
    seen: dict[tuple, int] = {}
    for kernel in kernels:
        rings = {r.value for r in kernel.ring_buffers}
        for member in kernel.members if kernel.is_cascade else ():
            ms = [nodes[n] for n in member.nodes]
            if ms[0].op_type == "Conv" and is_int8_member(ms):
                key = _shape(ms, ms[0].inputs[0], ms[-1].outputs[0], rings)
                seen[key] = seen.get(key, 0) + 1
    return frozenset(key for key, count in seen.items() if count > 1)


def _shape(ms: list[ir.Node], x: ir.Value, y: ir.Value, rings) -> tuple:  # noqa: ANN001
    return (tuple(n.op_type for n in ms), repr(conv_geom(ms[0])), x.name in rings, y.name in rings)


def _shareable(ms: list[ir.Node], x: ir.Value, y: ir.Value, stores,  # noqa: ANN001
               twins: frozenset) -> bool:
    """Whether the member is written as a function whose ring rows are arguments: a depthwise
    conv, or a pointwise conv on the matrix core (its fill reads channels ``rows x width`` apart
    without arithmetic on the stride, im2col.py), reading or writing a ring, of a shape another
    member has (``shape_twins``). Layers of one shape then share one function
    (opfuse/backends/c/kernel_functions.py)."""
    head = ms[0]
    if head.op_type != "Conv" or not (x.name in stores.rings or y.name in stores.rings):
        return False
    if (_shape(ms, x, y, stores.rings) not in twins
            and "int8" not in kernels(stores.params.store.isa).member_functions):
        return False
    g = conv_geom(head)
    if is_depthwise8(g, head, int_ctype(x, head).name):
        return True
    pointwise = g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0) and g.group == 1
    return pointwise and g.icg % 4 == 0 and conv_mcu.uses_matrix_core(g, stores.params)


class _MemberStores:
    """The cascade's stores seen from a member function: its own parameters, the same rings."""

    def __init__(self, stores, params) -> None:  # noqa: ANN001
        self.params, self.rings, self.plan = params, stores.rings, stores.plan
        self.rows = stores.rows


def _emit_function(w: CWriter, ms: list[ir.Node], x: ir.Value, y: ir.Value, stores,
                   functions, view: ir.Node | None = None) -> None:  # noqa: ANN001
    """The member as a call of its own function (rows ``a``, ``b`` and ring rows as
    arguments), defined once for every member of the same code."""
    from opfuse.backends.c.tensors import Params

    funcs, defined, _ = functions
    params = Params(stores.params.store, restrict=bool(stores.params.restrict))
    body = CWriter(1)
    first, last = params._add("row:a", "int {name}", "a"), params._add("row:b", "int {name}", "b")
    rx, ry = stores.rows(x), stores.rows(y)
    twin = _shape(ms, x, y, stores.rings) in functions[2]  # else its rows stay constants
    if twin and x.name in stores.rings:
        rx = params._add("rows:x", "int {name}", str(rx))
    if twin and y.name in stores.rings:
        ry = params._add("rows:y", "int {name}", str(ry))
    body(f"const int a = {first}, b = {last};")
    _emit_rows(body, ms, x, y, _MemberStores(stores, params), rx, ry, view)
    _scratch_as_argument(body.lines, params)
    fname = defined.define(funcs, len(defined.bodies), stores.member, params, body.lines)
    w(params.call(fname))


def _scratch_as_argument(lines: list[str], params) -> None:  # noqa: ANN001
    """The im2col scratch in the arena (mcu_tiles.declare_scratch) passed in, not written in: its
    offset depends on the cascade's step, the function's code does not."""
    for i, line in enumerate(lines):
        code = line.split("/*")[0]
        if "im2col quads" in line and code.rstrip().endswith(");") and "(AB + " in code:
            where = code.split("=", 1)[1].strip().rstrip(";")
            name = params._add("scratch", "int64_t *{name}", where)
            lines[i] = line[:len(line) - len(line.lstrip())] + f"int64_t *col = {name};"


def _times(rows: int | str, width: int) -> int | str:
    """``rows * width`` of a ring whose rows are a number or a C argument."""
    return rows * width if isinstance(rows, int) else f"{rows}*{width}"


def _emit_rows(w: CWriter, ms: list[ir.Node], x: ir.Value, y: ir.Value, stores,  # noqa: ANN001
               rx: int | str, ry: int | str, view: ir.Node | None = None) -> None:
    head, params = ms[0], stores.params
    _, c_in, _, w_in = dims(x, head)
    _, c_out, _, w_out = dims(y, ms[-1])
    xp = _ptr(stores, x, head) if view is None else params.inp(view.inputs[0], view)
    yp = _ptr(stores, y, ms[-1], write=True)
    xct, yct = int_ctype(x, head), int_ctype(y, ms[-1])
    windowed = head.op_type == "Conv" or head.op_type in POOLS
    rest = ms[1:] if windowed else ms
    first = head.outputs[0] if windowed else x
    chain = Chain8(rest, dims(y, ms[-1]), params, first.name) if rest else None

    def row(ih: str) -> str:  # input row ih of the channel at xc
        return channel_row("xc", ih, rx, w_in, rx == dims(x, head)[2])

    def store(ch: str, col: str) -> None:
        v = chain.emit(w, "v", ["0", ch, "r", col]) if chain is not None else "v"
        w(f"yr[{col}] = ({yct.name}){v};")

    w.open("for (int r = a; r <= b; ++r)")
    if head.op_type == "Conv":
        _conv(w, head, params, xp, rx, w_in, yp, ry, w_out, xct.name, yct, store, rest,
              nhwc=view is not None)
    elif head.op_type in POOLS:
        g = pool_geom(head, dims(x, head), dims(head.outputs[0], head))
        xq, hq = quant(x, head, "input"), quant(head.outputs[0], head, "output")
        hct = int_ctype(head.outputs[0], head)
        w.open(f"for (int c = 0; c < {c_out}; ++c)")
        w(f"const {xct.name} *xc = {xp} + c*{rx * w_in};")
        w(f"{yct.name} *yr = {ring_row(yp, 'c', 'r', ry, w_out)};")
        w.open(f"for (int ow = 0; ow < {w_out}; ++ow)")
        emit_pool_value8(w, g, xq, hq, xct.name, hct, rounding(params), "r", row)
        store("c", "ow")
        w.close()
        w.close()
    else:
        w.open(f"for (int c = 0; c < {c_out}; ++c)")
        w(f"const {xct.name} *xr = {ring_row(xp, 'c', 'r', rx, w_in)};")
        w(f"{yct.name} *yr = {ring_row(yp, 'c', 'r', ry, w_out)};")
        w.open(f"for (int i = 0; i < {w_out}; ++i)")
        w("const int32_t v = xr[i];")
        store("c", "i")
        w.close()
        w.close()
    w.close()


def _conv(w: CWriter, node: ir.Node, params, xp: str, rx: int | str, w_in: int, yp: str,
          ry: int | str,
          w_out: int, xct: str, yct, store, rest=None, nhwc: bool = False) -> None:  # noqa: ANN001
    """Output row ``r`` of an int8 conv in blocks of output channels, as the layer-by-layer conv:
    the same packed weights, int32 bias and per-channel requantization; each integer is then
    ``store``d (through the epilogue). ``nhwc``: ``xp`` is a whole NHWC graph input (the matrix
    core's fill reads it in place; support.why_not_stream allows no other path)."""
    g = conv_geom(node)
    if conv_mcu.uses_matrix_core(g, params):  # Cortex-M4/M7: the layer-by-layer matrix core
        conv_mcu.emit_rows_mcu(w, node, params, g, xp=xp, rx=rx, w_in=w_in, yp=yp, ry=ry,
                               w_out=w_out, xct=xct, yct=yct, store=store, epilogue=rest,
                               nhwc=nhwc)
        return
    assert not nhwc, "only the matrix core's rows read an NHWC input (support.why_not_stream)"
    whole = rx == g.ih

    def row(ih: str) -> str:
        return channel_row("xc", ih, rx, w_in, whole)

    if is_depthwise8(g, node, xct):  # the layer-by-layer kernel's row core (depthwise_dsp.py),
        # which registers its own operands (its bias only where it reads it)
        emit_depthwise_member(w, node, params, g, xp, _times(rx, w_in), row,
                              f"{yct.name} *yr = {ring_row(yp, 'c', 'r', ry, w_out)}", store,
                              rest if yct.name == "int8_t" else None)
        return
    xq = quant(node.inputs[0], node, "input")
    wq, yq = quant(node.inputs[1], node, "weight"), quant(node.outputs[0], node, "output")
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    rq = requant_arrays(params, node.name, conv_scales(xq, wq, yq, g.oc, rounding(params)))
    hct = int_ctype(node.outputs[0], node)
    # a cascade computes one row at a time (a pointwise conv too): short rows as channel tiles
    # (``conv_lanes``), every other row as column tiles, over its ring rows or a line buffer
    plan = conv8_plan(g, node, xct, member=True)
    wt = packed_weights(params, node.inputs[1], g, plan.ocb)
    arr = const(node.inputs[1])
    sums = Int8Sums(xct, rq, zy, hct, 2 if pairs_fit_int16(xct, arr) else 1)
    b = folded_bias(params, f"{node.name}:bias", bias_array(node, 2, g.oc), arr, zx)
    src = RowSource.of(xp, g.c, g.ih, w_in, rx)
    emit_member_rows8(w, g, zx, plan, src, wt, b, sums,
                      f"{yct.name} *yr = {ring_row(yp, 'c', 'r', ry, w_out)};",
                      lambda col: store("c", col))
