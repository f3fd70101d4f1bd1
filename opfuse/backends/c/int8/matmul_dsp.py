"""The register-blocked int8 matrix core of Armv7E-M (Cortex-M4, M7): a tile of ``cols``
columns of int16 activations (the im2col scratch, ``opfuse/backends/c/int8/im2col.py``) times
``rows`` rows of int8 weights, as int32 sums in registers (docs/architecture.md, "int8 matrix
kernels on Cortex-M").

Per four reduction steps and tile, under ``OPFUSE_DSP``: each weight row is one 32-bit load and
two ``__sxtb16`` (the second on the word rotated by 8, which the instruction does for free), each
column two 32-bit loads of int16 pairs, and each (row, column) two ``__smlad`` (ACLE). The
weights are re-laid out at generation time so that no run-time shuffle is needed: in every group
of four the bytes are stored k0, k2, k1, k3, so ``__sxtb16`` gives the lanes (k0, k1) and the
rotated word (k2, k3), the order the scratch holds the activations in. The portable C (every
other core, and ``-DOPFUSE_NO_DSP``) reads the same bytes with plain multiplies; both sums are
exact in int32, so both paths give the same integers.

Scratch layout: int16 pairs in int32 words; ``col[(kb*stride + q)*2 + h]`` holds column ``q``'s
reduction indices ``4 kb + 2 h`` (low half) and ``4 kb + 2 h + 1`` (high half), so a tile's loads
sit at small constant offsets from one pointer that moves ``stride*8`` bytes per step.
"""

from __future__ import annotations

import numpy as np

from opfuse.backends.c.cgen import CWriter

QUAD = 4  # reduction steps per 32-bit weight word
PERMUTE = (0, 2, 1, 3)  # byte order of a weight word: __sxtb16 pairs (k0, k1) and (k2, k3)


def padded(k: int) -> int:
    """The reduction length rounded up to whole weight words (the tail reads zeros)."""
    return -(-k // QUAD) * QUAD


def weight_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` [N][K] (int) as the core reads them: [N][Kp] int8, zero-padded, each group of
    four bytes stored in ``PERMUTE`` order."""
    n, k = rows.shape
    out = np.zeros((n, padded(k)), np.int8)
    out[:, :k] = rows.astype(np.int8)
    return out.reshape(n, -1, QUAD)[:, :, list(PERMUTE)].reshape(n, -1)


def emit_core(w: CWriter, *, rows: int, cols: int, stride: int, kp: int, col: str,
              wrow: str) -> None:
    """Declare ``int32_t a{j}_{q}`` for ``j < rows``, ``q < cols``: the sum over the reduction of
    scratch column ``q`` (``col``, laid out with ``stride`` columns) times weight row ``j``
    (``wrow`` + ``j*kp`` bytes)."""
    acc = [[f"a{j}_{q}" for q in range(cols)] for j in range(rows)]
    w(f"int32_t {', '.join(f'{a} = 0' for r in acc for a in r)};")
    w.open("")
    w(f"const int32_t *cp = {col};")
    w(f"const int8_t *wp = {wrow};")
    w("#ifdef OPFUSE_DSP")
    w.open(f"for (int kb = 0; kb < {kp // QUAD}; ++kb)")
    for q in range(cols):
        w(f"const int32_t x{q}l = cp[{q * 2}], x{q}h = cp[{q * 2 + 1}];")
    for j in range(rows):
        w.open("")
        w("int32_t wr;")
        w(f"memcpy(&wr, wp + {j * kp}, 4);")
        w("const int32_t wl = __sxtb16(wr);")
        w("int32_t wh;  /* gcc 12 does not fold a rotation into sxtb16 by itself */")
        w('__asm__ ("sxtb16 %0, %1, ror #8" : "=r" (wh) : "r" (wr));')
        for q in range(cols):
            w(f"{acc[j][q]} = __smlad(x{q}l, wl, {acc[j][q]});")
            w(f"{acc[j][q]} = __smlad(x{q}h, wh, {acc[j][q]});")
        w.close()
    w(f"cp += {stride * 2};")
    w(f"wp += {QUAD};")
    w.close()
    w("#else")
    w.open(f"for (int kb = 0; kb < {kp // QUAD}; ++kb)")
    w(f"const int32_t *c = cp + kb*{stride * 2};")
    w(f"const int8_t *r = wp + kb*{QUAD};")
    for j in range(rows):
        for q in range(cols):
            lo, hi = f"c[{q * 2}]", f"c[{q * 2 + 1}]"
            wt = f"r[{j * kp}"
            w(f"{acc[j][q]} += (int16_t){lo}*{wt}] + ({lo} >> 16)*{wt} + 2]"
              f" + (int16_t){hi}*{wt} + 1] + ({hi} >> 16)*{wt} + 3];")
    w.close()
    w("#endif")
    w.close()


def tiles(n: int, size: int) -> list[tuple[int, int, int]]:
    """(count, start, width) of the full tiles of ``size`` over ``n`` and of the remainder."""
    full, rest = divmod(n, size)
    out = [(full, 0, size)] if full else []
    if rest:
        out.append((1, full * size, rest))
    return out
