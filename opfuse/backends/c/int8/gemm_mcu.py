"""int8 Gemm/MatMul (fully connected) for Armv7E-M targets (Cortex-M4, M7): a row of A against
``GEMM_ROWS`` rows of B at a time, with no scratch (docs/architecture.md, "int8 matrix kernels on
Cortex-M").

Per four reduction steps, under ``OPFUSE_DSP``: one word of A widened once by ``SXTB16`` (or
``UXTB16`` for uint8) and ``SXTB16 ror #8`` into the int16 pairs (a0, a2), (a1, a3), then per row
of B one word widened the same way and two ``SMLAD`` (ACLE): B keeps its natural [N][K] order, the
bytes ``conv.py``'s Gemm stores. The zero point of A is folded into the bias (no padding in a
Gemm: sum (a - z_a) b = sum a b - z_a sum b), so A is read raw. The K % 4 tail, and every step
of the portable C (``-DOPFUSE_NO_DSP``), is the plain integer dot product: the same int32 sums.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.ctype import INT8, INT32
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import bias_array, int_ctype, quant, requant_arrays, rounding
from opfuse.backends.c.int8.conv_mcu import emit_output_value, weights_int8
from opfuse.backends.c.tensors import Params
from opfuse.quant import conv_scales

# rows of B per pass over a row of A (at most; the largest that divides N, so one core per Gemm),
# measured under QEMU on ad01_int8 (all fully connected): 4 (547k instructions) beat 2 (605k),
# 5 (570k) and 6 (595k); 3 (535k) needs a second core for the N % 3 rows, and flash counts too
GEMM_ROWS = 4


def emit_gemm_mcu(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
                  nk: np.ndarray) -> None:
    """Gemm/MatMul y[m, j] = sum_k a[m, k] B[j, k] (``nk``: B as [N][K], checked by the caller)."""
    av, bv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    n_out, k = nk.shape
    a_shape = dims(av, node)
    m_rows = int(np.prod(a_shape[:-1])) if len(a_shape) > 1 else 1
    aq, bq, yq = quant(av, node, "input"), quant(bv, node, "weight"), quant(yv, node, "output")
    act, yct = int_ctype(av, node), int_ctype(yv, node)
    za, zy = int(aq.zero_point[0]), int(yq.zero_point[0])
    weights_int8(node, bv)
    bias = _gemm_bias(node, n_out) - za * nk.astype(np.int64).sum(axis=1)
    wt = params.weight(f"{bv.name}:nk", np.ascontiguousarray(nk).astype(np.int8), INT8)
    b = params.weight(f"{node.name}:mat_bias", bias.astype(np.int32), INT32)
    rq = requant_arrays(params, node.name, conv_scales(aq, bq, yq, n_out, rounding(params)))
    a = params.inp(av, node)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    rows = next(r for r in range(GEMM_ROWS, 0, -1) if n_out % r == 0)  # one core per Gemm
    w.open(f"for (int m = 0; m < {m_rows}; ++m)")
    w(f"const {act.name} *ar = {a} + m*{k};")
    w.open(f"for (int j0 = 0; j0 < {n_out}; j0 += {rows})")
    emit_dot_rows(w, rows=rows, a="ar", act=act.name, wrow=f"{wt} + j0*{k}", k=k)
    w(f"const int32_t acc[{rows}] = {{{', '.join(f'a{j}' for j in range(rows))}}};")
    w.open(f"for (int jj = 0; jj < {rows}; ++jj)")
    w("const int j = j0 + jj;")
    emit_output_value(w, rq, f"acc[jj] + {b}[j]", "j", zy, yct, chain is None)
    if chain is not None:
        w(f"v = {chain.emit(w, 'v', _gemm_coords(shape))};")
    w(f"{y}[m*{n_out} + j] = ({yct.name})v;")
    w.close()
    w.close()
    w.close()


def emit_dot_rows(w: CWriter, *, rows: int, a: str, act: str, wrow: str, k: int) -> None:
    """Declare ``int32_t a{j}`` (``j < rows``): the dot product of ``a`` (k entries) with weight
    row ``j`` (``wrow + j*k``)."""
    widen = "sxtb16" if act == "int8_t" else "uxtb16"
    w(f"int32_t {', '.join(f'a{j} = 0' for j in range(rows))};")
    w.open("")
    w(f"const {act} *xp = {a};")
    w(f"const int8_t *wp = {wrow};")
    w("int kk = 0;")
    w("#ifdef OPFUSE_DSP")
    w.open(f"for (; kk < {k - k % 4}; kk += 4, xp += 4, wp += 4)")
    w("int32_t xr, xh;")
    w("memcpy(&xr, xp, 4);")
    w(f"const int32_t xl = __{widen}(xr);")
    w(f'__asm__ ("{widen} %0, %1, ror #8" : "=r" (xh) : "r" (xr));  /* gcc 12 will not fold it */')
    for j in range(rows):
        w.open("")
        w("int32_t wr, wh;")
        w(f"memcpy(&wr, wp + {j * k}, 4);")
        w("const int32_t wl = __sxtb16(wr);")
        w('__asm__ ("sxtb16 %0, %1, ror #8" : "=r" (wh) : "r" (wr));')
        w(f"a{j} = __smlad(xl, wl, a{j});")
        w(f"a{j} = __smlad(xh, wh, a{j});")
        w.close()
    w.close()
    if k % 4 == 0:  # no tail on the DSP path: the scalar loop is the portable C only
        w("#else")
    else:
        w("#endif")
    w.open(f"for (; kk < {k}; ++kk, ++xp, ++wp)")
    w("const int32_t xv = *xp;")
    for j in range(rows):
        w(f"a{j} += xv * wp[{j * k}];")
    w.close()
    if k % 4 == 0:
        w("#endif")
    w.close()


def _gemm_bias(node: ir.Node, n_out: int) -> np.ndarray:
    return bias_array(node, 2, n_out) if node.op_type == "Gemm" else np.zeros(n_out, np.int64)


def _gemm_coords(shape: tuple[int, ...]) -> list[str]:
    """The output's coordinates of row ``m``, column ``j`` (batched rows: its own dims)."""
    if len(shape) <= 2:
        return ["m", "j"][-len(shape):] if shape else []
    lead = list(shape[:-1])
    coords, rest = [], "m"
    for d in range(len(lead) - 1, -1, -1):
        coords.insert(0, f"({rest}) % {lead[d]}")
        rest = f"({rest}) / {lead[d]}"
    return [*coords, "j"]
