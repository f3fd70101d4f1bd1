"""Float convs on Helium's floating-point vectors (MVE-F; isa/mve/__init__.py): four float32
lanes a vector, ``vfmaq_n_f32`` (one fused multiply-add of a vector by a scalar weight, four MACs
an instruction), ``vctp32q`` predicating a row's or a plane's last partial vector instead of a
scalar tail. The whole conv under ``#ifdef OPFUSE_MVEF`` (the core has MVE's float instructions),
the C the other cores run in its ``#else`` (``portable``).

Three kernels, each vectorized over output pixels of one channel (NCHW: contiguous stores), each
over whole tensors or a cascade member's rows (``RowSource`` in and out):

* ``pointwise``: a 1x1 conv (stride 1, no padding) is a GEMM over the H*W plane (or a row): a
  tile of four pixels x four output channels (four accumulators, the input vector loaded once a
  channel and multiplied by four weights in core registers), the weights in blocks of eight
  output channels ``[OC/8][IC][8]`` (the layout the portable 1x1 path reads: one copy in flash
  where both use it).
* ``floatdw.py``: a depthwise conv's output rows, four columns a vector.
* ``floatdirect.py``: a conv over few input channels x taps (a stem), four columns x four
  output channels a tile.

The epilogue: clamps only (Relu, Clip with constant bounds), each a compare and a select
(``OPFUSE_CLAMPF``: VCMP + VPSEL) so NaN passes through as in the scalar C's ``v < lo ? lo :
v``; any other chain keeps the portable C alone."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.convdirect import pack_weights
from opfuse.backends.c.epilogue import clamps
from opfuse.backends.c.isa.mve.floatepilogue import LANES, OCT, apply_clamps
from opfuse.backends.c.rowsource import RowSource
from opfuse.ir.values import const

WB = 8  # output channels of a weight block


def pointwise_fits(g) -> bool:  # noqa: ANN001
    return (g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0) and g.group == 1
            and g.oc % WB == 0)


def pointwise(w: CWriter, g, src: RowSource, dst: RowSource, rows: tuple[str, str] | None,  # noqa: ANN001
              wp: str, b: str | None, steps) -> None:  # noqa: ANN001
    """The 1x1 conv's GEMM (module docstring) over ``wp``, the weights in blocks of eight: the
    whole planes (``rows`` None), or rows ``rows[0] .. rows[1]`` of a cascade's rings, a row at
    a time."""
    if rows is None:
        p = g.oh * g.ow
        w.open(f"for (int n = 0; n < {g.n}; ++n)")
        w(f"const float *xn = {src.channel('n', '0')};")
        w(f"float *yn = {dst.channel('n', '0')};")
    else:
        p = g.ow
        w.open(f"for (int r = {rows[0]}; r <= {rows[1]}; ++r)")
        w(f"const float *xn = {src.channel('0', '0')} + {src.row('r')};")
        w(f"float *yn = {dst.channel('0', '0')} + {dst.row('r')};")
    sx, sy = src.stride, dst.stride
    full, rest = divmod(p, LANES)
    w.open(f"for (int ob = 0; ob < {g.oc // OCT}; ++ob)")
    w(f"const float *wb = {wp} + (ob >> 1)*{g.c * WB} + (ob & 1)*{OCT};")
    for j in range(OCT):
        w(f"const float b{j} = {f'{b}[ob*{OCT} + {j}]' if b is not None else '0.0f'};")
    w(f"float *yo = yn + ob*{OCT * sy};")
    if full:
        w.open(f"for (int q = 0; q < {full * LANES}; q += {LANES})")
        _tile(w, g, sx, sy, steps, None)
        w.close()
    if rest:
        w.open("")
        w(f"const int q = {full * LANES};")
        w(f"const mve_pred16_t tp = vctp32q({rest}u);")
        _tile(w, g, sx, sy, steps, "tp")
        w.close()
    w.close()
    w.close()


def _tile(w: CWriter, g, sx: int, sy: int, steps, pred: str | None) -> None:  # noqa: ANN001
    """Four pixels from ``q`` x the block's four channels (``sx``, ``sy``: floats between two
    channels of the input and the output): the sums over every input channel, two channels an
    iteration (the loop's own instructions halved)."""
    for j in range(OCT):
        w(f"float32x4_t a{j} = vdupq_n_f32(b{j});")
    w("const float *xq = xn + q;")
    w("const float *wk = wb;")
    load = f"vldrwq_z_f32(xq, {pred})" if pred else "vldrwq_f32(xq)"
    step = 2 if g.c % 2 == 0 else 1
    w.open(f"for (int ic = 0; ic < {g.c}; ic += {step})")
    for u in range(step):  # the weights two a load (OPFUSE_LDRD: isa/mve/__init__.py)
        for j in range(0, OCT, 2):
            w(f"float w{u}{j}, w{u}{j + 1};")
            w(f"OPFUSE_LDRD(w{u}{j}, w{u}{j + 1}, wk, {(u * WB + j) * 4});")
    for u in range(step):
        w(f"const float32x4_t x{u} = {load.replace('xq', f'xq + {u * sx}' if u else 'xq')};")
        for j in range(OCT):
            w(f"a{j} = vfmaq_n_f32(a{j}, x{u}, w{u}{j});")
    w(f"xq += {step * sx};")
    w(f"wk += {step * WB};")
    w.close()
    for j in range(OCT):
        apply_clamps(w, f"a{j}", steps)
        at = f"yo + {j * sy} + q" if j else "yo + q"
        w(f"vstrwq_p_f32({at}, a{j}, {pred});" if pred else f"vstrwq_f32({at}, a{j});")


def conv_float(w: CWriter, node: ir.Node, g, epilogue: list[ir.Node], params, src: RowSource,  # noqa: ANN001
               dst: RowSource, rows: tuple[str, str] | None,
               portable: Callable[[CWriter], None]) -> bool:
    """``IsaKernels.conv_float``: a pointwise or depthwise conv whose ``epilogue`` is clamps
    only, under ``OPFUSE_MVEF``, ``portable``'s C in the #else; False for any other conv."""
    from opfuse.backends.c.isa.mve import floatdirect, floatdw

    steps = clamps(epilogue)
    arr = const(node.inputs[1])
    if steps is None or arr is None:
        return False
    if pointwise_fits(g):
        blocks = [(j * WB, WB, WB) for j in range(g.oc // WB)]
        packed, _ = pack_weights(np.asarray(arr, np.float32).reshape(g.oc, g.c, 1, 1), 1, blocks)
        key = f"{node.inputs[1].name}:ocb{WB}"  # conv.py's 1x1 path: the same blocks of eight

        def body(w: CWriter) -> None:
            pointwise(w, g, src, dst, rows, params.weight(key, packed), b, steps)
    elif floatdw.fits(g):
        def body(w: CWriter) -> None:
            wt = params.weight(node.inputs[1].name, np.asarray(arr, np.float32))
            floatdw.depthwise(w, g, src, dst, rows, wt, b, steps)
    elif floatdirect.fits(g):
        blocks = [(j * OCT, OCT, OCT) for j in range(g.oc // OCT)]
        packed, _ = pack_weights(np.asarray(arr, np.float32).reshape(g.oc, g.c, *g.k), 1, blocks)

        def body(w: CWriter) -> None:
            wp = params.weight(f"{node.inputs[1].name}:ocb{OCT}", packed)
            floatdirect.direct(w, g, src, dst, rows, wp, b, steps)
    else:
        return False
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] is not None else None
    b = None if bias is None else params.weight(bias.name, np.asarray(const(bias), np.float32)
                                                .ravel())
    # each branch names the parameters only the other reads (their weights' layouts differ)
    mve = CWriter(w.depth + 1)
    body(mve)
    other = CWriter(w.depth)
    portable(other)
    names = set(params.by_key.values())
    mine, theirs = ({t for t in re.findall(r"\w+", " ".join(lines)) if t in names}
                    for lines in (mve.lines, other.lines))
    w("#ifdef OPFUSE_MVEF")
    w.open("")
    for name in sorted(theirs - mine):
        w(f"(void){name};")
    w.lines.extend(mve.lines)
    w.close()
    w("#else")
    for name in sorted(mine - theirs):
        w(f"(void){name};")
    w.lines.extend(other.lines)
    w("#endif")
    return True
