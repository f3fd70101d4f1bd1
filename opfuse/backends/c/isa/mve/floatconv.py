"""Float convs on Helium's floating-point vectors (MVE-F; isa/mve/__init__.py): four float32
lanes a vector, ``vfmaq_n_f32`` (one fused multiply-add of a vector by a scalar weight, four MACs
an instruction), ``vctp32q`` predicating a row's or a plane's last partial vector instead of a
scalar tail. The whole conv under ``#ifdef OPFUSE_MVEF`` (the core has MVE's float instructions),
the C the other cores run in its ``#else`` (``portable``).

Two kernels, both vectorized over output pixels of one channel (NCHW: contiguous stores):

* ``pointwise``: a 1x1 conv (stride 1, no padding) is a GEMM over the H*W plane: a tile of four
  pixels x four output channels (four accumulators, the input vector loaded once a channel and
  multiplied by four weights in core registers), the weights in blocks of eight output channels
  ``[OC/8][IC][8]`` (the layout the portable 1x1 path reads: one copy in flash where both use it).
* ``depthwise.py``: a depthwise conv's output rows, four columns a vector.

The epilogue: clamps only (Relu, Clip with constant bounds), each a compare and a select
(``vcmpltq_n_f32`` + ``vpselq_f32``) so NaN passes through as in the scalar C's ``v < lo ? lo :
v``; any other chain keeps the portable C alone."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from opfuse.backends.c.cgen import CWriter, attr, flit
from opfuse.backends.c.convdirect import pack_weights
from opfuse.backends.c.epilogue import ACC

LANES = 4  # float32 lanes of a 128-bit vector
OCT = 4  # output channels of a pointwise tile
WB = 8  # output channels of a weight block


def clamps(chain) -> list[tuple[str | None, str | None]] | None:  # noqa: ANN001
    """The chain's steps as (low, high) C literals (None: no bound), or None when a step is not a
    clamp with constant bounds (an operand, any other op)."""
    if chain.operands:
        return None
    out = []
    for node, args in chain.steps:
        if args[0] != ACC:
            return None
        if node.op_type == "Relu":
            out.append(("0.0f", None))
        elif node.op_type == "Clip":
            bounds = []
            for i, name in ((1, "min"), (2, "max")):
                a = args[i] if i < len(args) else None
                if a is None:
                    value = attr(node, name)
                    bounds.append(None if value is None else flit(value))
                elif isinstance(a, str) and a != ACC:
                    bounds.append(a)
                else:
                    return None
            out.append((bounds[0], bounds[1]))
        else:
            return None
    return out


def apply_clamps(w: CWriter, v: str, steps: list[tuple[str | None, str | None]]) -> None:
    """``v = clamp(v)`` per step, as the scalar chain's selects (NaN stays)."""
    for lo, hi in steps:
        if lo is not None:
            w(f"{v} = vpselq_f32(vdupq_n_f32({lo}), {v}, vcmpltq_n_f32({v}, {lo}));")
        if hi is not None:
            w(f"{v} = vpselq_f32(vdupq_n_f32({hi}), {v}, vcmpgtq_n_f32({v}, {hi}));")


def pointwise_fits(g) -> bool:  # noqa: ANN001
    return (g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0) and g.group == 1
            and g.oc % WB == 0)


def pointwise(w: CWriter, g, x: str, arr: np.ndarray, b: str | None,  # noqa: ANN001
              steps, y: str, weight: Callable[[str, np.ndarray], str], key: str) -> None:
    """The 1x1 conv's GEMM (module docstring); ``weight(key, array)`` registers the packed
    weights (the key of the portable 1x1 path's blocks of eight)."""
    p = g.oh * g.ow
    blocks = [(j * WB, WB, WB) for j in range(g.oc // WB)]
    packed, _ = pack_weights(arr.reshape(g.oc, g.c, 1, 1), 1, blocks)
    wp = weight(f"{key}:ocb{WB}", packed)
    full, rest = divmod(p, LANES)
    w.open(f"for (int n = 0; n < {g.n}; ++n)")
    w(f"const float *xn = {x} + n*{g.c * p};")
    w(f"float *yn = {y} + n*{g.oc * p};")
    w.open(f"for (int ob = 0; ob < {g.oc // OCT}; ++ob)")
    w(f"const float *wb = {wp} + (ob >> 1)*{g.c * WB} + (ob & 1)*{OCT};")
    for j in range(OCT):
        w(f"const float b{j} = {f'{b}[ob*{OCT} + {j}]' if b is not None else '0.0f'};")
    w(f"float *yo = yn + ob*{OCT * p};")
    if full:
        w.open(f"for (int q = 0; q < {full * LANES}; q += {LANES})")
        _tile(w, g, p, steps, None)
        w.close()
    if rest:
        w.open("")
        w(f"const int q = {full * LANES};")
        w(f"const mve_pred16_t tp = vctp32q({rest}u);")
        _tile(w, g, p, steps, "tp")
        w.close()
    w.close()
    w.close()


def _tile(w: CWriter, g, p: int, steps, pred: str | None) -> None:  # noqa: ANN001
    """Four pixels from ``q`` x the block's four channels: the sums over every input channel,
    two channels an iteration (the loop's own instructions halved)."""
    for j in range(OCT):
        w(f"float32x4_t a{j} = vdupq_n_f32(b{j});")
    w("const float *xq = xn + q;")
    w("const float *wk = wb;")
    load = f"vldrwq_z_f32(xq, {pred})" if pred else "vldrwq_f32(xq)"
    step = 2 if g.c % 2 == 0 else 1
    w.open(f"for (int ic = 0; ic < {g.c}; ic += {step})")
    for u in range(step):
        w(f"const float32x4_t x{u} = {load.replace('xq', f'xq + {u * p}' if u else 'xq')};")
        for j in range(OCT):
            w(f"a{j} = vfmaq_n_f32(a{j}, x{u}, wk[{u * WB + j}]);")
    w(f"xq += {step * p};")
    w(f"wk += {step * WB};")
    w.close()
    for j in range(OCT):
        apply_clamps(w, f"a{j}", steps)
        at = f"yo + {j * p} + q" if j else "yo + q"
        w(f"vstrwq_p_f32({at}, a{j}, {pred});" if pred else f"vstrwq_f32({at}, a{j});")



def conv_float(w: CWriter, node, g, params, x: str, b: str | None, chain, y: str,  # noqa: ANN001
               portable: Callable[[CWriter], None]) -> bool:
    """``IsaKernels.conv_float``: a pointwise or depthwise conv with a clamps-only epilogue under
    ``OPFUSE_MVEF``, ``portable``'s C in the #else; False for any other conv."""
    from opfuse.backends.c.isa.mve import floatdw
    from opfuse.ir.values import const

    steps = clamps(chain)
    arr = const(node.inputs[1])
    if steps is None or arr is None:
        return False
    if pointwise_fits(g):
        def body(w: CWriter) -> None:
            pointwise(w, g, x, arr, b, steps, y, params.weight, node.inputs[1].name)
    elif floatdw.fits(g):
        wt = params.inp(node.inputs[1], node)

        def body(w: CWriter) -> None:
            floatdw.depthwise(w, g, x, wt, b, steps, y)
    else:
        return False
    # each branch names the parameters only the other reads (their weights' layouts differ)
    known = set(params.by_key.values())
    mve = CWriter(w.depth + 1)
    body(mve)
    mine = set(params.by_key.values()) - known
    other = CWriter(w.depth)
    portable(other)
    theirs = set(params.by_key.values()) - known - mine
    w("#ifdef OPFUSE_MVEF")
    w.open("")
    for name in sorted(theirs):
        w(f"(void){name};")
    w.lines.extend(mve.lines)
    w.close()
    w("#else")
    for name in sorted(mine - set(" ".join(other.lines).replace("[", " ").split())):
        w(f"(void){name};")
    w.lines.extend(other.lines)
    w("#endif")
    return True
