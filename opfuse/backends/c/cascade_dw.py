"""Depthwise row kernel of a cascaded C member (float32; see ``cascade_rows.py`` for the
addressing and the epilogue contract).

Per channel the KH input rows are row pointers into the ring (a static zero row above and below
the tensor) and the KH*KW weights scalars; the columns are cut at compile time into runs reading
the same taps (the padded edges), and a run goes in chunks of exactly VEC columns, the last moved
back (``_row_run``): no scalar remainder whose clip would branch (it mispredicted on real data). A
horizontal stride > 1 first splits the KH rows into column phases (``ph[ky][f][j] = x[j*S + f -
P]``) so every tap is a contiguous load. Rows shorter than NARROW_DW accumulate tap by tap into a
row padded to VEC, whose epilogue then runs with no remainder (``_narrow_store``).
"""

from __future__ import annotations

import numpy as np

from opfuse.backends.c.cascade_rows import VEC, bias_of, geometry, line_width, phase_copy, store_row
from opfuse.backends.c.cgen import CWriter
from opfuse.ir.values import const, static_dims

NARROW_DW = 8  # depthwise rows narrower than this accumulate tap by tap


def _padded(width: int) -> int:
    return -(-width // VEC) * VEC


def _narrow_store(w: CWriter, u: str, yp: str, ry: int, w_out: int, epilogue: list[str]) -> None:
    """Epilogue and store of a short row ``u`` (``_padded(w_out)`` floats, all defined): the
    epilogue runs over the padded row in place, then a plain copy stores ``w_out`` columns, so
    no compare-and-branch remainder loop. An epilogue that reads a residual row cannot run past
    ``w_out`` and runs in the store loop."""
    if any("+ i]" in line for line in epilogue):
        w.open(f"for (int i = 0; i < {w_out}; ++i)")
        w(f"float v = {u}[i];")
        store_row(w, yp, ry, w_out, epilogue)
        w.close()
        return
    w.open(f"for (int i = 0; i < {_padded(w_out)}; ++i)")
    w(f"float v = {u}[i];")
    for line in epilogue:
        w(line)
    w(f"{u}[i] = v;")
    w.close()
    w(f"for (int i = 0; i < {w_out}; ++i) {yp}[(c*{ry} + ys)*{w_out} + i] = {u}[i];")


def emit_depthwise(w: CWriter, node, xp: str, rx: int, yp: str, ry: int, epilogue, params) -> None:  # noqa: ANN001
    """Rows ``a .. b`` of a depthwise conv (see the module docstring)."""
    g = geometry(node)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl) = g["k"], g["s"], g["d"], g["p"]
    _, c, h_in, w_in = static_dims(node.inputs[0])
    _, _, _, w_out = static_dims(node.outputs[0])
    weight = np.asarray(const(node.inputs[1]), np.float32)
    wt = params.weight(node.inputs[1].name, weight)
    bias = bias_of(node)
    bp = params.weight(node.inputs[2].name, bias) if bias is not None else None
    phases = sw > 1
    if phases:
        lw = line_width(g, w_out)
        w(f"float ph[{kh * sw * lw}];")
    else:
        w(f"static const float zrow[{w_in}] = {{0.0f}};")
    w.open("for (int r = a; r <= b; ++r)")
    w(f"const int ys = r % {ry};")  # ring slots once per row, not per channel
    for ky in range(kh):
        w(f"const int iy{ky} = r*{sh} - {pt} + {ky * dh};")
        w(f"const int in{ky} = iy{ky} >= 0 && iy{ky} < {h_in};")
        w(f"const int sl{ky} = in{ky} ? iy{ky} % {rx} : 0;")
    w.open(f"for (int c = 0; c < {c}; ++c)")
    w(f"const float *wc = {wt} + c*{kh * kw};")
    for t in range(kh * kw):
        w(f"const float w{t} = wc[{t}];")
    w(f"const float bv = {bp}[c];" if bp else "const float bv = 0.0f;")
    if phases:  # the KH rows split into column phases, zero-padded: taps become contiguous
        for ky in range(kh):
            w.open(f"if (in{ky})")
            w(f"const float *xr = {xp} + (c*{rx} + sl{ky})*{w_in};")
            phase_copy(w, f"(ph + {ky * sw * lw})", "xr", sw, lw, pl, w_in)
            w.close()
            w(f"else for (int j = 0; j < {sw * lw}; ++j) ph[{ky * sw * lw} + j] = 0.0f;")
        terms = " + ".join(
            f"w{ky * kw + kx}*ph[{ky * sw * lw + ((kx * dw) % sw) * lw + (kx * dw) // sw} + i]"
            for ky in range(kh) for kx in range(kw))  # fmt: skip
        if w_out < NARROW_DW:
            w(f"float u[{_padded(w_out)}];")
            w(f"for (int i = 0; i < {_padded(w_out)}; ++i) u[i] = bv;")
            for ky in range(kh):
                for kx in range(kw):
                    off = ky * sw * lw + ((kx * dw) % sw) * lw + (kx * dw) // sw
                    w(f"for (int i = 0; i < {w_out}; ++i) u[i] += w{ky * kw + kx}*ph[{off} + i];")
            _narrow_store(w, "u", yp, ry, w_out, epilogue)
        else:
            _row_run(w, 0, w_out, f"bv + {terms}", lambda: store_row(w, yp, ry, w_out, epilogue),
                     params.restrict != "")
    else:
        for ky in range(kh):
            w(f"const float *{params.restrict} x{ky} = in{ky} ? {xp} + (c*{rx} + sl{ky})*{w_in} : zrow;")
        if w_out < NARROW_DW:  # shorter than a vector: one loop per tap beats one per run
            w(f"float u[{_padded(w_out)}];")
            w(f"for (int i = 0; i < {_padded(w_out)}; ++i) u[i] = bv;")
            for ky in range(kh):
                for kx in range(kw):
                    off = kx * dw - pl
                    lo, hi = max(0, -off), min(w_out, w_in - off)
                    if lo < hi:
                        w(f"for (int i = {lo}; i < {hi}; ++i) u[i] += w{ky * kw + kx}*x{ky}[i + {off}];")
            _narrow_store(w, "u", yp, ry, w_out, epilogue)
            w.close()
            w.close()
            return
        for lo, hi, kxs in _runs(w_out, w_in, kw, 1, dw, pl):
            terms = " + ".join(
                f"w{ky * kw + kx}*x{ky}[i + {kx * dw - pl}]" for ky in range(kh) for kx in kxs
            )
            _row_run(w, lo, hi, f"bv{' + ' + terms if terms else ''}",
                     lambda: store_row(w, yp, ry, w_out, epilogue), params.restrict != "")
    w.close()
    w.close()


def _row_run(w: CWriter, lo: int, hi: int, expr: str, store, overlap: bool) -> None:  # noqa: ANN001
    """``v = expr`` (of column ``i``), epilogue and store for ``lo <= i < hi``. A run of at least
    VEC columns goes in chunks of exactly VEC, the last one moved back to end at ``hi`` (its
    first columns are computed twice, to the same value): no scalar remainder, whose
    compare-and-branch epilogue mispredicts on real data. Not when the output may alias an
    operand (``overlap`` false: an in-place residual would be added twice)."""
    if not overlap or hi - lo < VEC:
        w.open(f"for (int i = {lo}; i < {hi}; ++i)")
    else:
        w.open(f"for (int i0 = {lo}; i0 < {hi}; i0 += {VEC})")
        w(f"const int j0 = i0 + {VEC} <= {hi} ? i0 : {hi - VEC};")
        w.open(f"for (int q = 0; q < {VEC}; ++q)")
        w("const int i = j0 + q;")
    w(f"float v = {expr};")
    store()
    w.close()
    if overlap and hi - lo >= VEC:
        w.close()


def _runs(w_out: int, w_in: int, kw: int, s: int, d: int, pl: int) -> list:
    """Output columns cut into runs ``(lo, hi, taps)`` that read the same in-range taps kx."""
    runs: list = []
    for i in range(w_out):
        kxs = tuple(kx for kx in range(kw) if 0 <= i * s + kx * d - pl < w_in)
        if runs and runs[-1][2] == kxs:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1, kxs])
    return [tuple(r) for r in runs]
