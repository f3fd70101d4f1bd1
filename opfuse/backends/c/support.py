"""What the C backend can write, as pure predicates over IR nodes: the partitioner consults them
(``opfuse.fusion.support``) so that every kernel and cascade analyze reports is one ``--emit c``
builds (docs/architecture.md, "One partition, one plan").

``why_not_kernel`` follows the dispatch of ``kernels.emit_kernel``: float kernels by the form
the emitter writes them in (``float_form.py``: an anchor + epilogues that keep its output shape,
or that broadcast a small result up as a squeeze-excite scale does, + a pool after a Conv; a
pool + epilogues; an elementwise chain) and int8 kernels (``int8/__init__.py``: an anchor or pool + an int8 chain on
its output shape; an int8 elementwise chain), every operand broadcast to the shape the chain runs
on. ``why_not_stream`` is ``cascade.why_not_member``. Both read shapes, dtypes, quantization
parameters and op tables only; they emit nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from opfuse.backends.c.attention import why_not_attention
from opfuse.backends.c.cascade import why_not_member
from opfuse.backends.c.cgen import bcast_strides
from opfuse.backends.c.conv import conv_geom
from opfuse.backends.c.epilogue import EPILOGUE_OPS
from opfuse.backends.c.float_form import LOCAL_LIMIT, float_form
from opfuse.backends.c.int8 import is_int8_kernel
from opfuse.backends.c.int8.chain import BINARY_OPS, CHAIN_OPS, CLAMP_OPS
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.norms_add import (
    ends_with_norm,
    is_add_norm,
    why_not_add_norm,
    why_not_anchor_norm,
)
from opfuse.backends.c.pools import POOL_OPS
from opfuse.backends.c.typed import is_typed
from opfuse.fusion.attention import core_of
from opfuse.fusion.support import KernelSupport
from opfuse.fusion.views import nhwc_view
from opfuse.ir.values import const, static_dims
from opfuse.kernelplan import convf
from opfuse.ops import groups
from opfuse.quant import get_quant
from opfuse.targets.isa import Isa

_INT8_ANCHORS = groups.C_INT8_ANCHORS
_INT8_POOLS = groups.C_INT8_POOLS


def why_not_kernel(members: Sequence[ir.Node], isa: Isa | None = None) -> str | None:
    """None when the layer-by-layer C writes one kernel of ``members`` (in schedule order), else
    a phrase saying why not. Sizes nobody knows are the emitter's to refuse (``require_static``).
    ``isa``: the target's, which decides the int8 conv's path (None: no target, so no kernel
    reads an NHWC input in place)."""
    if len(members) < 2:
        return None
    if any(static_dims(n.outputs[0]) is None for n in members if n.outputs):
        return None
    if nhwc_view(members) is not None:
        return _why_not_nhwc(members, isa)
    core = core_of(members)  # the attention kernel (backends/c/attention.py)
    if core is not None:
        return why_not_attention(core)
    if is_int8_kernel(list(members)):
        return _why_not_int8(members)
    return _why_not_float(members)


def _why_not_float(members: Sequence[ir.Node]) -> str | None:
    """What the float kernel of ``members`` lacks, by the form the emitter writes it in
    (float_form.py)."""
    form = float_form(members)
    head, rest, op = form.head, list(members[1:]), form.head.op_type
    if form.kind == "add_norm":
        return why_not_add_norm(members)
    if form.kind == "anchor_norm":
        return why_not_anchor_norm(members) or _same_shape(
            rest[:-1], static_dims(head.outputs[0]), "the anchor's")
    odd = next((n for n in members if is_typed(n)), None)
    if odd is not None:  # the epilogue chain holds float registers only
        return f"{odd.op_type} on masks or integers runs as its own kernel"
    if form.kind == "view_matmul":
        # a strided view the MatMul reads in place (fusion/views.py), then the MatMul's kernel
        if len(static_dims(head.outputs[0]) or ()) < 2:
            return "a transposed operand of rank < 2"
        perm = list(head.attributes["perm"].value) if "perm" in head.attributes else [0, 0]
        if rest[0].inputs[0] is head.outputs[0] or perm[-1] == len(perm) - 1:
            # measured (benchmarks/matmul_views.py, tiny_transformer): reading these in place
            # was 0.89x the materialized copy; only a right operand with a strided n dim gains
            return "a transposed operand whose rows the MatMul reads faster materialized"
        if len(members) > 2 and any(static_dims(n.outputs[0]) != static_dims(rest[0].outputs[0])
                                    for n in rest[1:]):
            return "an epilogue after a viewed MatMul that changes the output's shape"
        if ends_with_norm(rest) or is_add_norm(rest):
            return "a MatMul reading a transposed operand in place does not end with a norm"
        return _why_not_float(rest) if len(rest) > 1 else None
    for node in rest:
        if node.op_type not in EPILOGUE_OPS | POOL_OPS or node.domain not in ("", "ai.onnx"):
            return f"no float C epilogue for {node.op_type}"
    if form.kind == "anchor":
        if form.pool is not None:
            if op != "Conv":
                return f"a pool after {op} (only a Conv's kernel ends with one)"
            if any(n.op_type in POOL_OPS for n in form.post):
                return "two pools in one kernel"
            return (_same_shape(form.pre, static_dims(head.outputs[0]), "the anchor's")
                    or _same_shape(form.post, static_dims(form.pool.outputs[0]), "the pool's"))
        if form.grow is None:
            return _same_shape(form.pre, static_dims(head.outputs[0]), "the anchor's")
        if form.small_elements > LOCAL_LIMIT:
            return (f"{form.pre[form.grow].op_type} broadcasts a result of "
                    f"{form.small_elements:,} elements up to a larger output (the kernel keeps "
                    f"at most {LOCAL_LIMIT:,})")
        return _broadcast_chain(form.pre[form.grow:], float_kernel=True)
    if form.kind == "pool":
        if any(n.op_type in POOL_OPS for n in rest):
            return "two pools in one kernel"
        return _same_shape(rest, static_dims(head.outputs[0]), "the pool's")
    if form.kind == "chain":
        if any(n.op_type in POOL_OPS for n in rest):
            return "a pool after an elementwise op"
        return _broadcast_chain(members, float_kernel=True)
    return f"a fused kernel that starts with {op}"


def _why_not_nhwc(members: Sequence[ir.Node], isa: Isa | None) -> str | None:
    """A graph input's NHWC -> NCHW Transpose read in place by the Conv after it
    (fusion/views.py), layer by layer: the conv's path (``why_not_nhwc_conv``), then its chain."""
    rest = list(members[1:])
    int8 = is_int8_kernel(rest)
    why = why_not_nhwc_conv(members[1], int8, isa, member=False)
    if why is not None:
        return why
    if not int8 and any(n.op_type in POOL_OPS for n in rest):
        return "a pool after a conv reading an NHWC input in place"
    if len(rest) == 1:
        return None
    return _why_not_int8(rest) if int8 else _why_not_float(rest)


def why_not_nhwc_conv(conv: ir.Node, int8: bool, isa: Isa | None, member: bool) -> str | None:
    """The one list of conv paths that read an NHWC graph input in place through an NHWC
    ``RowSource`` (rowsource.py), layer by layer or (``member``) as a cascade's first member:
    int8: the matrix core's fill (SMLAD or Helium, any conv but a depthwise one; int8/im2col.py)
    and, layer by layer, x86's staging of a one-group conv (``IsaKernels.conv8_nhwc``); float:
    the plan's pixel tiles (kernelplan/convf.py: a scalar FPU's pointwise convs and small stems,
    a vector unit's stem layer by layer), where the ISA does not take the conv whole
    (``conv_float``: cortex-m55's MVE-F kernels read NCHW rows)."""
    where = "as a cascade member" if member else "layer by layer"
    if isa is None:
        return "an NHWC input read in place needs the target's conv path"
    g, ks = conv_geom(conv), kernels(isa)
    if int8:
        if ks.conv8_nhwc and not member:  # x86/stage.py and its portable C (int8/conv.py)
            return ("this target's grouped int8 conv does not read an NHWC input in place"
                    if g.group > 1 else None)
        if isa.int8_dot in ("smlad", "mve") and ks.conv8 is None \
                and not (g.group > 1 and g.icg == 1):
            return None
        return f"this target's int8 conv does not read an NHWC input in place {where}"
    if ks.conv_float is not None:
        return "this target's float conv kernels read NCHW rows"
    if const(conv.inputs[1]) is None \
            or convf.plan_convf(g, isa.scalar, member=member).path != "pixels":
        return f"only the float conv's pixel tiles read an NHWC input in place {where}"
    return None


def _why_not_int8(members: Sequence[ir.Node]) -> str | None:
    head, rest = members[0], list(members[1:])
    for node in rest:
        if node.op_type not in CHAIN_OPS or node.domain not in ("", "ai.onnx"):
            return f"no int8 C epilogue for {node.op_type}"
    if head.op_type in _INT8_ANCHORS | _INT8_POOLS:
        return _same_shape(rest, static_dims(head.outputs[0]), f"the {head.op_type}'s") or _quant(rest)
    if head.op_type in CHAIN_OPS:
        return _broadcast_chain(members, float_kernel=False) or _quant(members)
    return f"an int8 {head.op_type} kernel with ops after it"


def _same_shape(chain: Sequence[ir.Node], shape: tuple[int, ...] | None, whose: str) -> str | None:
    """An output stage on ``shape``: every op keeps it, every operand broadcasts to it."""
    for node in chain:
        out = static_dims(node.outputs[0])
        if out != shape:
            return (f"{node.op_type} writes {list(out or ())}, not {whose} output "
                    f"{list(shape or ())} (its output stage holds one shape)")
        why = _operands(node, shape)
        if why is not None:
            return why
    return None


def _broadcast_chain(chain: Sequence[ir.Node], float_kernel: bool) -> str | None:
    """A standalone elementwise chain runs over its last op's output: every op's output and every
    operand must broadcast to it."""
    shape = static_dims(chain[-1].outputs[0])
    for node in chain:
        if float_kernel and not _broadcasts(static_dims(node.outputs[0]), shape):
            return f"{node.op_type} writes {list(static_dims(node.outputs[0]))}, larger than the chain's"
        why = _operands(node, shape)
        if why is not None:
            return why
    return None


def _operands(node: ir.Node, shape: tuple[int, ...] | None) -> str | None:
    for i, value in enumerate(node.inputs):
        if value is None:
            continue
        arr = const(value)
        if arr is not None and arr.size == 1:
            continue
        vshape = static_dims(value)
        if vshape is not None and node.op_type == "BatchNormalization" and i > 0 and shape:
            vshape = vshape + (1,) * (len(shape) - 2)
        if not _broadcasts(vshape, shape):
            return (f"{node.op_type}'s operand '{value.name}' {list(vshape or ())} does not "
                    f"broadcast to the kernel's output {list(shape or ())}")
    return None


def _broadcasts(shape: tuple[int, ...] | None, out: tuple[int, ...] | None) -> bool:
    if shape is None or out is None:
        return True  # unknown: the emitter says so itself
    try:
        bcast_strides(shape, out)
    except ValueError:
        return False
    return True


def _quant(chain: Sequence[ir.Node]) -> str | None:
    """The int8 chain's own arithmetic: a clamp on one set of parameters, binary ops per tensor."""
    for node in chain:
        if node.op_type in CLAMP_OPS and get_quant(node.inputs[0]) != get_quant(node.outputs[0]):
            return f"an int8 {node.op_type} whose input and output are quantized differently"
        if node.op_type in BINARY_OPS:
            for value in node.inputs[:2]:
                q = get_quant(value) if value is not None else None
                if q is not None and q.scale.size != 1:
                    return f"an int8 {node.op_type} of '{value.name}', quantized per channel"
    return None


def why_not_stream(members: Sequence[ir.Node], isa: Isa | None = None) -> str | None:
    """None when the cascaded C streams one member kernel of ``members``, else why not. A
    conv reading an NHWC graph input in place (fusion/views.py) streams where its member path
    reads rows through an NHWC ``RowSource``: a scalar FPU's float pixel tiles, the Cortex-M
    int8 matrix core's fill, SMLAD or Helium (the cascade's first member: its input is the
    graph's)."""
    if nhwc_view(members) is not None:
        rest = list(members[1:])
        why = why_not_nhwc_conv(members[1], is_int8_kernel(rest), isa, member=True)
        return why or why_not_member(rest)
    return why_not_member(list(members))


C_SUPPORT = KernelSupport("the C backend", why_not_kernel, why_not_stream)


def c_support(isa: Isa) -> KernelSupport:
    """``C_SUPPORT`` for a target whose ISA record is ``isa``: its conv paths decide whether a
    conv reads an NHWC graph input in place, layer by layer and as a cascade member."""
    return KernelSupport("the C backend", lambda ms: why_not_kernel(ms, isa),
                         lambda ms: why_not_stream(ms, isa))
