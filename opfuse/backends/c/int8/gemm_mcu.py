"""int8 Gemm/MatMul (fully connected) for the ISAs with a fully connected core
(``IsaKernels.gemm_core``: Cortex-M): a row of A against ``GEMM_ROWS`` rows of B at a time, with
no scratch (docs/architecture.md, "int8 matrix kernels on Cortex-M").

The core sums four reduction steps a word on Armv7E-M (SXTB16 and two SMLAD per row of B) and
16 bytes a VMLADAV on Helium; B is stored as the core reads it (``IsaKernels.gemm_weights``:
Armv7E-M interleaves 4 rows' words where N % 4 = 0 and K % 4 = 0, every layer of ad01_int8),
other shapes keep B's natural [N][K] order. The zero point of A is folded
into the bias (no padding in a Gemm: sum (a - z_a) b = sum a b - z_a sum b), so A is read raw,
and the accumulator starts at the bias. The K % 4 tail, and every step of the portable C
(built without the ISA's extension), is the plain integer dot product over the same bytes: the same int32 sums.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.ctype import INT8, INT32
from opfuse.backends.c.int8.chain import Chain8
from opfuse.backends.c.int8.common import (
    acc_bound,
    bias_array,
    gemm_coords,
    int_ctype,
    quant,
    requant_arrays,
    rounding,
)
from opfuse.backends.c.int8.conv_mcu import weights_int8
from opfuse.backends.c.int8.output import emit_output_value
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.tensors import Params
from opfuse.quant import conv_scales

# rows of B per pass over a row of A (at most; the largest that divides N, so one core per Gemm),
# measured under QEMU on ad01_int8 (all fully connected) with the C loop: 4 (547k instructions)
# beat 2 (605k), 5 (570k) and 6 (595k); 3 (535k) needs a second core for the N % 3 rows, and
# flash counts too. The assembly loop is written for 4 (12 registers of the 14 there are)
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
    given = _gemm_bias(node, n_out)
    bias = given - za * nk.astype(np.int64).sum(axis=1)
    rows = next(r for r in range(GEMM_ROWS, 0, -1) if n_out % r == 0)  # one core per Gemm
    isa = kernels(params.store.isa)  # B in the layout the ISA's fully connected core reads
    tag, order = isa.gemm_weights(nk, rows) if isa.gemm_weights else ("nk", nk)
    wt = params.weight(f"{bv.name}:{tag}", np.ascontiguousarray(order).astype(np.int8), INT8)
    b = params.weight(f"{node.name}:mat_bias", bias.astype(np.int32), INT32)
    bound = acc_bound(nk, given, act.lo, act.hi, za)
    rq = requant_arrays(params, node.name, conv_scales(aq, bq, yq, n_out, rounding(params)), bound)
    a = params.inp(av, node)
    shape = dims(yv, node)
    chain = Chain8(pre, shape, params, yv.name) if pre else None
    y = params.out((pre or [node])[-1].outputs[0], node)
    w.open(f"for (int m = 0; m < {m_rows}; ++m)")
    w(f"const {act.name} *ar = {a} + m*{k};")
    w.open(f"for (int j0 = 0; j0 < {n_out}; j0 += {rows})")
    init = [f"{b}[j0 + {jj}]" for jj in range(rows)]
    isa.gemm_core(w, rows=rows, a="ar", act=act.name, wrow=f"{wt} + j0*{k}", k=k, init=init)
    for jj in range(rows):  # the output stage per row, unrolled: the sums stay in registers
        w.open("")
        w(f"const int j = j0 + {jj};")
        emit_output_value(w, rq, f"a{jj}", "j", zy, yct, chain is None, params.store.isa)
        if chain is not None:
            w(f"v = {chain.emit(w, 'v', gemm_coords(shape))};")
        w(f"{y}[m*{n_out} + j] = ({yct.name})v;")
        w.close()
    w.close()
    w.close()


def _gemm_bias(node: ir.Node, n_out: int) -> np.ndarray:
    return bias_array(node, 2, n_out) if node.op_type == "Gemm" else np.zeros(n_out, np.int64)
