"""The fully connected core on Helium (isa/mve/__init__.py): a row of A (int8) against ``rows``
rows of B in their natural [N][K] order. Per 16 reduction steps one load of A and, per row of B,
one load and one ``vmladavaq_s8`` (16 int8 x int8 products summed into the int32 accumulator);
the K % 16 tail is one more step with the loads zeroed past K (``vctp8q``, ``vldrbq_z_s8``), so
nothing is read beyond a row. uint8 activations keep the portable C (no unsigned x signed
product in MVE's 8-bit dot products)."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter

LANES = 16


def gemm_core(w: CWriter, *, rows: int, a: str, act: str, wrow: str, k: int,
              init: list[str]) -> None:
    """Declare ``int32_t a{jj}`` = ``init[jj]`` + sum_kk ``a[kk]`` * ``wrow[jj*k + kk]``."""
    w(f"int32_t {', '.join(f'a{jj} = {init[jj]}' for jj in range(rows))};")
    w.open("")
    w(f"const {act} *ap = {a};")
    w(f"const int8_t *bp = {wrow};")
    if act == "int8_t":
        w("#ifdef OPFUSE_MVE")
        full = k - k % LANES
        if full:
            w.open(f"for (int kk = 0; kk < {full}; kk += {LANES})")
            w("const int8x16_t x = vldrbq_s8(ap + kk);")
            for jj in range(rows):
                w(f"a{jj} = vmladavaq_s8(a{jj}, x, vldrbq_s8(bp + {jj * k} + kk));")
            w.close()
        if full < k:
            w.open("")
            w(f"const mve_pred16_t p = vctp8q({k - full}u);")
            w(f"const int8x16_t x = vldrbq_z_s8(ap + {full}, p);")
            for jj in range(rows):
                w(f"a{jj} = vmladavaq_s8(a{jj}, x, vldrbq_z_s8(bp + {jj * k + full}, p));")
            w.close()
        w("#else")
    w.open(f"for (int kk = 0; kk < {k}; ++kk)")
    w("const int32_t x = ap[kk];")
    for jj in range(rows):
        w(f"a{jj} += x * bp[{jj * k} + kk];")
    w.close()
    if act == "int8_t":
        w("#endif")
    w.close()
