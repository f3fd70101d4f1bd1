"""The Armv7E-M int8 dot products (isa/armv7em/__init__.py has the ISA's summary): SIMD32
widening by ``SXTB16``/``UXTB16`` into int16 pairs and ``SMLAD``, two multiply-accumulates per
instruction (ACLE ``__smlad``; inline assembly where gcc 12 would not fold a rotation or split an
LDRD), under ``#ifdef OPFUSE_DSP``, with the portable C in the ``#else`` or as the tail. All give
the same int32 sums: the products and partial sums are exact in 32 bits.

``dot``: one row of activations and one of weights (``IsaKernels.dot``). ``dot_rows`` and
``dot_quads``: the fully connected core's row of A against several rows of B (int8/gemm_mcu.py).
"""

from __future__ import annotations

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa import portable


def dot(w: CWriter, acc: str, a: str, a_ctype: str, za: int, b: str, k: int) -> None:
    """``acc += sum((a[kk] - za) * b[kk]) for kk < k``; ``b`` is int8 (zero point 0)."""
    if k < 4 or a_ctype not in ("int8_t", "uint8_t"):
        portable.dot(w, acc, a, a_ctype, za, b, k)
        return
    widen = "__sxtb16" if a_ctype == "int8_t" else "__uxtb16"
    lanes = (za & 0xFFFF) | ((za & 0xFFFF) << 16)
    w("int kk = 0;")
    w("#ifdef OPFUSE_DSP")
    w.open(f"for (; kk + 4 <= {k}; kk += 4)")
    w("int32_t a4, b4;")
    w(f"memcpy(&a4, {a} + kk, 4);")
    w(f"memcpy(&b4, {b} + kk, 4);")
    w("int32_t a4r = (int32_t)(((uint32_t)a4 >> 8) | ((uint32_t)a4 << 24));  /* ror 8 */")
    w("int32_t b4r = (int32_t)(((uint32_t)b4 >> 8) | ((uint32_t)b4 << 24));")
    w(f"int16x2_t ae = {widen}(a4), ao = {widen}(a4r);")
    if za:
        w(f"ae = __ssub16(ae, (int16x2_t)0x{lanes:08x}u);")
        w(f"ao = __ssub16(ao, (int16x2_t)0x{lanes:08x}u);")
    w(f"{acc} = __smlad(ae, __sxtb16(b4), {acc});")
    w(f"{acc} = __smlad(ao, __sxtb16(b4r), {acc});")
    w.close()
    w("#endif")
    portable.dot_tail(w, acc, a, za, b, k)



def dot_rows(w: CWriter, *, rows: int, a: str, act: str, wrow: str, k: int,
                  init: list[str] | None = None) -> None:
    """Declare ``int32_t a{j}`` (``j < rows``): ``init[j]`` (0 without) plus the dot product of
    ``a`` (k entries) with weight row ``j`` (``wrow + j*k``). The SIMD loop takes 8 steps a pass
    where k allows (half the loop's counting and branching per MAC), else 4."""
    widen = "sxtb16" if act == "int8_t" else "uxtb16"
    start = init or ["0"] * rows
    w(f"int32_t {', '.join(f'a{j} = {start[j]}' for j in range(rows))};")
    w.open("")
    w(f"const {act} *xp = {a};")
    w(f"const int8_t *wp = {wrow};")
    w("int kk = 0;")
    w("#ifdef OPFUSE_DSP")
    step = 8 if k % 8 == 0 else 4
    w.open(f"for (; kk < {k - k % step}; kk += {step}, xp += {step}, wp += {step})")
    for off in range(0, step, 4):
        w.open("")
        w("int32_t xr, xh;")
        w(f"memcpy(&xr, xp + {off}, 4);")
        w(f"const int32_t xl = __{widen}(xr);")
        w(f'__asm__ ("{widen} %0, %1, ror #8" : "=r" (xh) : "r" (xr));  /* gcc 12 will not fold '
          'it */')
        for j in range(rows):
            w.open("")
            w("int32_t wr, wh;")
            w(f"memcpy(&wr, wp + {j * k + off}, 4);")
            w("const int32_t wl = __sxtb16(wr);")
            w('__asm__ ("sxtb16 %0, %1, ror #8" : "=r" (wh) : "r" (wr));')
            w(f"a{j} = __smlad(xl, wl, a{j});")
            w(f"a{j} = __smlad(xh, wh, a{j});")
            w.close()
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


def dot_quads(w: CWriter, *, a: str, act: str, wrow: str, k: int, init: list[str]) -> None:
    """``int32_t a0 .. a3``: ``init`` plus the dot products of ``a`` (k entries, k % 4 == 0)
    with 4 weight rows stored interleaved (``wrow``: per 4 steps, 4 bytes of each row). Under
    ``OPFUSE_DSP`` one assembly loop: per 4 steps one LDR and two SXTB16 of ``a``, two LDRD
    for the 4 rows' words, per row two SXTB16 and two SMLAD (22 instructions per 16 MACs; gcc
    12 spilled the loop's pointers and split the LDRDs, 27), 8 steps a pass where k allows."""
    widen = "sxtb16" if act == "int8_t" else "uxtb16"
    w(f"int32_t {', '.join(f'a{j} = {init[j]}' for j in range(4))};")
    w.open("")
    w(f"const {act} *xp = {a};")
    w(f"const int8_t *wp = {wrow};")
    w("#ifdef OPFUSE_DSP")
    w(f"const {act} *const xe = xp + {k};")
    w("int32_t xr, xl, t, w0, w1;")
    body = []
    for _ in range(2 if k % 8 == 0 else 1):
        body += ["ldr %[xr], [%[xp]], #4", f"{widen} %[xl], %[xr]",
                 f"{widen} %[xr], %[xr], ror #8"]
        for pair in (0, 2):
            body.append("ldrd %[w0], %[w1], [%[wp]], #8")
            for r, reg in ((pair, "w0"), (pair + 1, "w1")):
                body += [f"sxtb16 %[t], %[{reg}]", f"smlad %[a{r}], %[xl], %[t], %[a{r}]",
                         f"sxtb16 %[{reg}], %[{reg}], ror #8",
                         f"smlad %[a{r}], %[xr], %[{reg}], %[a{r}]"]
    w('__asm__ ("1:\\n\\t"')
    for line in body + ["cmp %[xp], %[xe]", "bne 1b"]:
        w(f'         "{line}\\n\\t"')
    w('         : [a0] "+r" (a0), [a1] "+r" (a1), [a2] "+r" (a2), [a3] "+r" (a3),')
    w('           [xp] "+r" (xp), [wp] "+r" (wp), [w0] "=&r" (w0), [w1] "=&r" (w1),')
    w('           [xr] "=&r" (xr), [xl] "=&r" (xl), [t] "=&r" (t)')
    w('         : [xe] "r" (xe) : "cc", "memory");')
    w("#else")
    w.open(f"for (int kk = 0; kk < {k}; ++kk)")
    w("const int32_t xv = xp[kk];")
    w("const int8_t *wq = wp + (kk >> 2)*16 + (kk & 3);")
    for j in range(4):
        w(f"a{j} += xv * wq[{4 * j}];")
    w.close()
    w("#endif")
    w.close()


def gemm_weights(nk: np.ndarray, rows: int) -> tuple[str, np.ndarray]:
    """(key tag, layout) of a fully connected layer's int8 B ([N][K]) for ``gemm_core``: per 4
    rows and 4 steps the 4 rows' words one after another where ``dot_quads`` reads them (4 rows a
    pass, K % 4 == 0), else the natural [N][K]."""
    n, k = nk.shape
    if rows != 4 or k % 4:
        return "nk", nk
    return "nk4", nk.reshape(n // 4, 4, k // 4, 4).transpose(0, 2, 1, 3)


def gemm_core(w: CWriter, *, rows: int, a: str, act: str, wrow: str, k: int,
              init: list[str]) -> None:
    """``int32_t a{jj}``: ``init[jj]`` plus the dot product of ``a`` with row ``jj`` of the block
    of B at ``wrow``, in the layout ``gemm_weights`` chose."""
    if rows == 4 and k % 4 == 0:
        dot_quads(w, a=a, act=act, wrow=wrow, k=k, init=init)
    else:
        dot_rows(w, rows=rows, a=a, act=act, wrow=wrow, k=k, init=init)
