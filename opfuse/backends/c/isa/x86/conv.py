"""Where conv.py's int8 Conv and Gemm/MatMul take the x86 micro-kernels (x86/core.py): the
graph facts (quantization, bias, epilogue chain, output indexing) around ``emit_core``, and the
portable C of conv.py in the ``#else``. Each ``emit_*_x86`` returns False, writing nothing, when
the micro-kernel does not apply (not the x86 host, depthwise, a weight zero point, a staged input
over ``STAGE_LIMIT``); conv.py then writes its portable C alone."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims
from opfuse.backends.c.conv import conv_geom
from opfuse.backends.c.int8.common import (
    bias_array,
    gemm_coords,
    int_ctype,
    quant,
    requant_arrays,
    rounding,
)
from opfuse.backends.c.int8.output import requant_clamp
from opfuse.backends.c.int8.plan import is_depthwise8
from opfuse.backends.c.isa.x86 import helpers as hx
from opfuse.backends.c.isa.x86.core import (
    STAGE_LIMIT,
    Arrays,
    Core,
    emit_core,
    emit_store_t8,
    pack,
)
from opfuse.backends.c.isa.x86.depthwise import emit_depthwise_x86, fold_chain
from opfuse.backends.c.isa.x86.gemv import emit_gemv
from opfuse.backends.c.isa.x86.lanes import emit_lanes, plan_lanes
from opfuse.backends.c.isa.x86.residual import (
    emit_residual_block,
    emit_residual_lanes,
    residual,
)
from opfuse.backends.c.isa.x86.residual_ymm import residual_t4
from opfuse.backends.c.isa.x86.stage import (
    emit_stage_nchw,
    emit_stage_nhwc,
    emit_stage_rows,
    emit_stage_sampled,
)
from opfuse.backends.c.tensors import Params
from opfuse.ir.values import const
from opfuse.kernelplan.conv8 import gemv_blocks, uses_gemv8
from opfuse.quant import ONNX, conv_scales

ROW_LIMIT = 128 * 1024  # bytes of the row buffer of an epilogue chain


def _scalar_v(rq, vector: bool, zy: int, bounds: tuple[int, int], ch: str,  # noqa: ANN001
              acc: str = "tmp[q][o]") -> str:
    """The output integer of ``acc``: already requantized, or requantized here (onnx)."""
    if vector:
        return acc
    return requant_clamp(rq, acc, ch, zy, None, bounds)


def _assemble(w: CWriter, params: Params, simd: CWriter,
              portable: Callable[[CWriter], None]) -> None:
    """The SIMD branches (``emit_core``'s lines, ending in ``#else``), the portable C, ``#endif``;
    each branch first marks every parameter of the kernel used (the others' arrays, the
    portable C's weights, would be unused parameters under -Wextra)."""
    c = CWriter(w.depth)
    portable(c)
    voids = " ".join(f"(void){name};" for name in params.by_key.values())
    for line in simd.lines:
        w.lines.append(line)
        if line.startswith(("#if", "#elif", "#else")):
            w(voids)
    w.lines.extend(c.lines)
    w.lines.append("#endif")


def emit_store_t4(w: CWriter, ocg: int, yb: str, plane: int, p: int,
                  add: Callable[[CWriter, int, int], list[str]] | None = None) -> None:
    """ymm (AVX2, ymm VNNI): ``p`` pixels of every channel (``tmp``, final int8 values) into NCHW
    bytes, 4 pixels at a time: per 8 channels the pixels' vectors packed to bytes and transposed
    by one ``vpshufb`` (each dword a channel's 4 pixels), then 4 (or fewer) bytes a channel,
    where the scalar loop read and stored each byte. ``add(w, q0, n)``: the vectors to pack
    instead of the loaded ``r0 .. r3`` (the residual Add, x86/residual_ymm.py)."""
    tr = ", ".join(str(4 * (i % 4) + i // 4) for i in range(16))
    w.open("")
    w(f"uint8_t *yb = (uint8_t *)({yb});")
    w(f"const __m256i tr = _mm256_setr_epi8({tr}, {tr});")
    w.open(f"for (int o8 = 0; o8 < {ocg}; o8 += 8)")
    w(f"const int n8 = {ocg} - o8 < 8 ? {ocg} - o8 : 8;")
    for q0 in range(0, p, 4):
        w.open("")
        for q in range(4):
            w(f"const __m256i r{q} = _mm256_load_si256((const __m256i *)(tmp[{q0 + q}] + o8));"
              if q0 + q < p else f"const __m256i r{q} = _mm256_setzero_si256();")
        v = add(w, q0, min(4, p - q0)) if add is not None else ["r0", "r1", "r2", "r3"]
        w("int32_t t4[8];")
        w("_mm256_storeu_si256((__m256i *)t4, _mm256_shuffle_epi8(_mm256_packs_epi16("
          f"_mm256_packs_epi32({v[0]}, {v[1]}), _mm256_packs_epi32({v[2]}, {v[3]})), tr));")
        w(f"for (int c = 0; c < n8; ++c) memcpy(yb + (o8 + c)*{plane} + {q0}, t4 + c, "
          f"{min(4, p - q0)});")
        w.close()
    w.close()
    w.close()


def _quant(node: ir.Node, xv, wv, yv):  # noqa: ANN001, ANN202
    xq, wq, yq = quant(xv, node, "input"), quant(wv, node, "weight"), quant(yv, node, "output")
    if xq.scale.size != 1 or yq.scale.size != 1 or np.any(wq.zero_point):
        return None
    return xq, wq, yq


def emit_conv_x86(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
                  portable: Callable[[CWriter], None], view: ir.Node | None = None) -> bool:
    """``view``: the NHWC -> NCHW Transpose of a graph input the conv reads in place
    (fusion/views.py), its staging then gathering each pixel's channels."""
    g = conv_geom(node)
    xv, wv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    arr = const(wv)
    xct, yct = int_ctype(xv, node), int_ctype(yv, node)
    if arr is None:
        return False
    if is_depthwise8(g, node, xct.name):
        if view is not None:
            return False
        emit = emit_depthwise_x86(w, node, pre, params, g)
        if emit is None:
            return False
        simd = CWriter(w.depth)
        emit(simd)
        _assemble(w, params, simd, portable)
        return True
    qs = _quant(node, xv, wv, yv)
    if qs is None:
        return False
    xq, wq, yq = qs
    pads = attr(node, "pads")
    # a 1x1 conv with a stride reads only its output's pixels: staged alone, it is pointwise
    pointwise = g.k == (1, 1) and g.p == (0, 0) and not any(
        pads[len(pads) // 2:] if pads else [])
    (sh, sw), (dh, dw), (ph, pw) = g.s, g.d, g.p
    if pointwise:
        core = Core(g.group, g.icg, g.ocg, 1, 1, 1, 1, 1, 1, 1, g.oh * g.ow, 1, g.oh * g.ow)
    else:
        core = Core(g.group, g.icg, g.ocg, g.k[0], g.k[1], sh, sw, dh, dw, g.oh, g.ow,
                    (g.oh - 1) * sh + (g.k[0] - 1) * dh + 1, (g.ow - 1) * sw + (g.k[1] - 1) * dw + 1,
                    g.icg == 1 and g.k[1] > 1 and dw == 1)
    if core.stage_bytes > STAGE_LIMIT:
        return False
    mode = rounding(params)
    real = conv_scales(xq, wq, yq, g.oc, mode)
    vector = mode != ONNX
    zx, zy = int(xq.zero_point[0]), int(yq.zero_point[0])
    a = pack(params, node.name, core, arr, bias_array(node, 2, g.oc), zx, xct.name == "int8_t",
             real if vector else None)
    if a is None:
        return False
    rq = requant_arrays(params, node.name, real)
    shape = dims(yv, node)
    bounds, chain = fold_chain(pre, yv, node, params, yct)
    x = params.inp(xv, node) if view is None else params.inp(view.inputs[0], view)
    y = params.out((pre or [node])[-1].outputs[0], node)
    plane_out = g.oh * g.ow

    def stage_nhwc(w: CWriter, a: Arrays) -> None:
        xg, c = f"{x} + n*{g.c * g.ih * g.iw} + grp*{g.icg}", g.c
        if pointwise and g.s != (1, 1):
            emit_stage_nhwc(w, core, a, xg, xct.name, c, g.iw * c * sh, c * sw, g.oh, g.ow, 0, 0,
                            g.ow)
        elif pointwise:
            emit_stage_nhwc(w, core, a, xg, xct.name, c, 0, c, 1, g.ih * g.iw, 0, 0, core.iwp)
        else:
            emit_stage_nhwc(w, core, a, xg, xct.name, c, g.iw * c, c, min(g.ih, core.ihp - ph),
                            min(g.iw, core.iwp - pw), ph, pw, core.iwp)

    def stage(w: CWriter, a: Arrays) -> None:  # a: the branch's (Arrays.signed on AVX2)
        if view is not None:
            stage_nhwc(w, a)
        elif pointwise and g.s != (1, 1):
            emit_stage_sampled(w, core, a, f"{x} + (n*{g.c} + grp*{g.icg})*{g.ih * g.iw}",
                               xct.name, g.ih, g.iw, g.oh, g.ow, g.s)
        elif pointwise:
            emit_stage_nchw(w, core, a, f"{x} + (n*{g.c} + grp*{g.icg})*{g.ih * g.iw}", xct.name,
                            1, g.ih * g.iw, 0, 0)
        else:
            emit_stage_nchw(w, core, a, f"{x} + (n*{g.c} + grp*{g.icg})*{g.ih * g.iw}", xct.name,
                            g.ih, g.iw, ph, pw)

    res = residual(pre, yv, node, params) if chain is not None else None

    def add_in_block(isa: str) -> bool:  # the residual Add on the register block
        # ymm: in emit_store_t4, whose signed packs need an int8 output
        return res is not None and vector and (isa == "zmm" or yct.name == "int8_t")

    def store(w: CWriter, p: int, isa: str) -> None:
        pix = "ow0" if pointwise else f"(oh*{g.ow} + ow0)"
        other = f"{res.ptr} + (n*{g.oc} + grp*{g.ocg})*{plane_out} + {pix}" if res else ""
        if isa == "zmm" and add_in_block(isa):  # the Add, then the transposing store below
            emit_residual_block(w, res, other, plane_out, core.ocg, p)
        if isa == "zmm" and vector and (chain is None or add_in_block(isa)):
            emit_store_t8(w, core, f"{y} + (n*{g.oc} + grp*{g.ocg})*{plane_out} + {pix}",
                          plane_out, p)
            return
        if isa in ("avx2", "ymm_vnni") and vector and yct.name == "int8_t" and (
                chain is None or add_in_block(isa)):
            emit_store_t4(w, g.ocg, f"{y} + (n*{g.oc} + grp*{g.ocg})*{plane_out} + {pix}",
                          plane_out, p, residual_t4(res, other, plane_out, g.ocg)
                          if chain is not None else None)
            return
        w.open(f"for (int o = 0; o < {g.ocg}; ++o)")
        w(f"const int oc = grp*{g.ocg} + o;")
        w(f"{yct.name} *yr = {y} + (n*{g.oc} + oc)*{plane_out} + {pix};")
        w.open(f"for (int q = 0; q < {p}; ++q)")
        w(f"int32_t v = {_scalar_v(rq, vector, zy, bounds, 'oc')};")
        if chain is not None:  # a row too long for rb: the chain block by block
            hw = [f"(ow0 + q) / {g.ow}", f"(ow0 + q) % {g.ow}"] if pointwise else \
                ["oh", "(ow0 + q)"]
            coords = ["n", "oc", *hw] if len(shape) == 4 else ["n", "oc", hw[1]]
            w(f"v = {chain.emit(w, 'v', coords)};")
        w(f"yr[q] = ({yct.name})v;")
        w.close()
        w.close()

    def row(w: CWriter, isa: str) -> None:  # the epilogue chain (or onnx rounding) along a row
        # never a Residual's with an int8 output: it needs TFLite's rounding (residual()), so the
        # requantization is in vectors and add_in_block holds, or the lanes take zmm (row_for)
        w.open(f"for (int o = 0; o < {g.ocg}; ++o)")
        w(f"const int oc = grp*{g.ocg} + o;")
        at = f"(n*{g.oc} + oc)*{plane_out}{'' if pointwise else f' + oh*{g.ow}'}"
        w(f"{yct.name} *yr = {y} + {at};")
        w.open(f"for (int i = 0; i < {core.cols}; ++i)")
        w(f"int32_t v = {_scalar_v(rq, vector, zy, bounds, 'oc', 'rb[o][i]')};")
        if chain is not None:
            hw = [f"i / {g.ow}", f"i % {g.ow}"] if pointwise else ["oh", "i"]
            coords = ["n", "oc", *hw] if len(shape) == 4 else ["n", "oc", hw[1]]
            w(f"v = {chain.emit(w, 'v', coords)};")
        w("yr[i] = (" + yct.name + ")v;")
        w.close()
        w.close()

    rowwise = (chain is not None or not vector) and core.ocg * core.cols * 4 <= ROW_LIMIT
    simd = CWriter(w.depth)
    lp = plan_lanes(core) if vector and (chain is None or res is not None) else None
    if lp is not None:  # the zmm branch with pixels in the lanes (x86/lanes.py)
        def res_lanes(w: CWriter, v: str, oc: str, pix: str, k: str) -> str:
            return emit_residual_lanes(w, res, v, f"{res.ptr} + (n*{g.oc} + {oc})*{plane_out} + "
                                       f"{pix}", k)

        simd.lines.append(f"#if {hx.ZMM}")
        emit_lanes(simd, core, a, lp, stage,
                   lambda oc, pix: f"{y} + (n*{g.oc} + {oc})*{plane_out} + {pix}", zy, *bounds,
                   g.n, res_lanes if res is not None else None)
    emit_core(simd, core, a, stage, store, vector, zy, *bounds, g.n,
              row if rowwise else None, lambda isa: not add_in_block(isa),
              ("zmm",) if lp is not None else (), lp is not None)
    _assemble(w, params, simd, portable)
    return True


def emit_gemm_x86(w: CWriter, node: ir.Node, pre: list[ir.Node], params: Params,
                  nk: np.ndarray, portable: Callable[[CWriter], None]) -> bool:
    """Gemm/MatMul with constant ``nk`` ([N][K]): the rows of A are the pixels of one row."""
    av, bv, yv = node.inputs[0], node.inputs[1], node.outputs[0]
    act, yct = int_ctype(av, node), int_ctype(yv, node)
    qs = _quant(node, av, bv, yv)
    if qs is None:
        return False
    aq, bq, yq = qs
    n_out, k = nk.shape
    a_shape = dims(av, node)
    rows = int(np.prod(a_shape[:-1])) if len(a_shape) > 1 else 1
    core = Core(1, k, n_out, 1, 1, 1, 1, 1, 1, 1, rows, 1, rows)
    if core.stage_bytes > STAGE_LIMIT:
        return False
    mode = rounding(params)
    real = conv_scales(aq, bq, yq, n_out, mode)
    vector = mode != ONNX
    bias = bias_array(node, 2, n_out) if node.op_type == "Gemm" else np.zeros(n_out, np.int64)
    za, zy = int(aq.zero_point[0]), int(yq.zero_point[0])
    bounds, chain = fold_chain(pre, yv, node, params, yct)
    # one row, tflite rounding, no chain left: the GEMV (x86/gemv.py), its own weight order
    gemv = gemv_blocks(n_out, k) if uses_gemv8(rows) and vector and chain is None else None
    a = pack(params, node.name, core, nk.reshape(n_out, k, 1, 1), bias, za,
             act.name == "int8_t", real if vector else None, gemv and gemv.blocks)
    if a is None:
        return False
    rq = requant_arrays(params, node.name, real)
    x = params.inp(av, node)
    shape = dims(yv, node)
    y = params.out((pre or [node])[-1].outputs[0], node)
    if gemv is not None:
        simd = CWriter(w.depth)
        emit_gemv(simd, gemv, a, x, y, yct.name, zy, *bounds, np.unique(real).size == 1)
        _assemble(w, params, simd, portable)
        return True

    def store(w: CWriter, p: int, isa: str) -> None:
        w.open(f"for (int q = 0; q < {p}; ++q)")
        w("const int m = ow0 + q;")
        w.open(f"for (int o = 0; o < {n_out}; ++o)")
        w(f"int32_t v = {_scalar_v(rq, vector, zy, bounds, 'o')};")
        if chain is not None:
            w(f"v = {chain.emit(w, 'v', gemm_coords(shape, 'm', 'o'))};")
        w(f"{y}[m*{n_out} + o] = ({yct.name})v;")
        w.close()
        w.close()

    simd = CWriter(w.depth)
    emit_core(simd, core, a, lambda w, a: emit_stage_rows(w, core, a, x, act.name), store, vector,
              zy, *bounds)
    _assemble(w, params, simd, portable)
    return True
