"""The register-blocked int8 matrix tile of Armv7E-M (Cortex-M4, M7; the armv7em ISA module): a tile of ``cols``
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

Scratch layout: ``col[kb*stride + q]`` (int64_t) holds column ``q``'s reduction indices
``4 kb .. 4 kb + 3`` as int16, lowest first, so a tile's loads (LDRD, inline assembly: gcc
splits an int64_t load into two LDRs) sit at small constant offsets from one pointer.
"""

from __future__ import annotations

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.base import QUAD, padded

PERMUTE = (0, 2, 1, 3)  # byte order of a weight word: __sxtb16 pairs (k0, k1) and (k2, k3)


# the one-row core's loop takes two quads a pass where they divide the reduction (no tail's
# code) and it has at least this many: on ResNet-8 (M7) two a pass ran 17.28M instructions and
# one 17.89M, but two everywhere grew the flash of ResNet-8 and vww_96 past what it was before
PAIRED_QUADS = 8


def weight_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` [N][K] (int) as the core reads them: [N][Kp] int8, zero-padded, each group of
    four bytes stored in ``PERMUTE`` order."""
    n, k = rows.shape
    out = np.zeros((n, padded(k)), np.int8)
    out[:, :k] = rows.astype(np.int8)
    return out.reshape(n, -1, QUAD)[:, :, list(PERMUTE)].reshape(n, -1)


def emit_core(w: CWriter, *, rows: int, cols: int, stride: int, kp: int, col: str,
              wrow: str, declare: bool = True) -> None:
    """Declare ``int32_t a{j}_{q}`` for ``j < rows``, ``q < cols``: the sum over the reduction of
    scratch column ``q`` (``col``: one int64_t quad per column, ``stride`` columns) times weight
    row ``j`` (``wrow`` + ``j*kp`` bytes). ``declare`` False: add to sums the caller declared
    (zero), as a row's narrower last tile does (mcu_tiles.row_tiles)."""
    acc = [[f"a{j}_{q}" for q in range(cols)] for j in range(rows)]
    if declare:
        w(f"int32_t {', '.join(f'{a} = 0' for r in acc for a in r)};")
    w.open("")
    w(f"const int64_t *cp = {col};")
    w(f"const int8_t *wp = {wrow};")
    w("#ifdef OPFUSE_DSP")
    if rows == 1:
        quads = kp // QUAD
        _asm_quads(w, acc[0], stride, quads, 2 if quads % 2 == 0 and quads >= PAIRED_QUADS else 1)
    else:
        w.open(f"for (int kb = 0; kb < {kp // QUAD}; ++kb, cp += {stride}, wp += {QUAD})")
        _dsp_step(w, acc, kp, 0, 0)
        w.close()
    w("#else")
    emit_portable(w, acc, stride, kp, PERMUTE)
    w("#endif")
    w.close()


def emit_portable(w: CWriter, acc: list[list[str]], stride: int, kp: int,
                  order: tuple[int, int, int, int]) -> None:
    """The tile's sums in plain C over the same scratch: a column's quad holds its four int16
    entries lowest first; ``order[i]``: the weight byte of a word that entry ``i`` multiplies
    (``PERMUTE`` for this module's layout, natural order for one that stores none)."""
    w.open(f"for (int kb = 0; kb < {kp // QUAD}; ++kb, cp += {stride}, wp += {QUAD})")
    for q in range(len(acc[0])):
        w.open("")
        w(f"const int32_t lo = (int32_t)cp[{q}], hi = (int32_t)(cp[{q}] >> 32);")
        for j in range(len(acc)):
            r = f"wp[{j * kp}"
            w(f"{acc[j][q]} += (int16_t)lo*{r}{'' if not order[0] else f' + {order[0]}'}]"
              f" + (lo >> 16)*{r} + {order[1]}]"
              f" + (int16_t)hi*{r} + {order[2]}] + (hi >> 16)*{r} + {order[3]}];")
        w.close()
    w.close()


def _asm_quads(w: CWriter, acc: list[str], stride: int, quads: int, unroll: int) -> None:
    """The reduction quads of a one-row tile, ``unroll`` a pass, in one assembly loop that
    leaves ``cp`` and ``wp`` past the last whole pass: per quad one LDR (post-indexed) and two
    SXTB16 of the weight word, per column one LDRD and two SMLAD; the first LDRD of a pass
    steps ``cp`` by the whole pass, the others reach back from it, so the loop adds nothing but
    its compare and branch (gcc 12's loop spilled its end and kept a separate add: 25
    instructions per 6-column quad, here 23)."""
    passes = quads // unroll
    if not passes:
        return
    step = unroll * stride * 8
    body = []
    for half in range(unroll):
        body += ["ldr %[w], [%[wp]], #4", "sxtb16 %[wl], %[w]", "sxtb16 %[w], %[w], ror #8"]
        for q, a in enumerate(acc):
            at = (half * stride + q) * 8
            body.append(f"ldrd %[xl], %[xh], [%[cp]], #{step}" if at == 0
                        else f"ldrd %[xl], %[xh], [%[cp], #{at - step}]")
            body += [f"smlad %[{a}], %[xl], %[wl], %[{a}]", f"smlad %[{a}], %[xh], %[w], %[{a}]"]
    w.open("")
    w(f"const int8_t *const we = wp + {passes * unroll * QUAD};")
    w("int32_t w, wl, xl, xh;")
    w('__asm__ ("1:\\n\\t"')
    for line in body + ["cmp %[wp], %[we]", "bne 1b"]:
        w(f'         "{line}\\n\\t"')
    outs = ", ".join(f'[{a}] "+r" ({a})' for a in acc)
    w(f'         : {outs}, [cp] "+r" (cp), [wp] "+r" (wp),')
    w('           [w] "=&r" (w), [wl] "=&r" (wl), [xl] "=&r" (xl), [xh] "=&r" (xh)')
    w('         : [we] "r" (we) : "cc", "memory");')
    w.close()


def _dsp_step(w: CWriter, acc: list[list[str]], kp: int, cq: int, wq: int) -> None:
    """One reduction quad of the tile, the scratch at ``cp + cq``, the weights at ``wp + wq``.
    The operand that is reused stays in registers: the weight row across the columns (a conv's
    tile), or the column across the weight rows (a Gemm's)."""
    rows, cols = len(acc), len(acc[0])
    w.open("")
    if rows == 1:
        _widen(w, 0, kp, wq)
        for q in range(cols):
            w.open("")
            _ldrd(w, cq + q)
            _smlad(w, acc[0][q], 0)
            w.close()
    else:
        for q in range(cols):  # plain loads: gcc's own scheduling spills less here
            c = f"cp[{cq + q}]"
            w(f"const int32_t xl{q} = (int32_t){c}, xh{q} = (int32_t)({c} >> 32);")
        for j in range(rows):
            w.open("")
            _widen(w, j, kp, wq)
            for q in range(cols):
                _smlad(w, acc[j][q], j, f"{q}")
            w.close()
    w.close()


def _widen(w: CWriter, j: int, kp: int, wq: int) -> None:
    """``w{j}l``, ``w{j}h``: weight row ``j``'s word at ``wp + wq`` as int16 pairs (k0, k1),
    (k2, k3)."""
    w(f"int32_t w{j}l, w{j}h, w{j}r;")
    w(f"memcpy(&w{j}r, wp + {j * kp + wq}, 4);")
    w(f"w{j}l = __sxtb16(w{j}r);")
    # gcc 12 does not fold a rotation into sxtb16 (its ror #8 operand) by itself
    w(f'__asm__ ("sxtb16 %0, %1, ror #8" : "=r" (w{j}h) : "r" (w{j}r));')


def _ldrd(w: CWriter, q: int, tag: str = "") -> None:
    """``xl{tag}``, ``xh{tag}``: column ``q``'s quad, one LDRD (gcc splits an int64_t load)."""
    w(f"int32_t xl{tag}, xh{tag};")
    w(f'__asm__ ("ldrd %0, %1, [%2, #{q * 8}]" : "=r" (xl{tag}), "=r" (xh{tag}) : "r" (cp), '
      f'"m" (cp[{q}]));')


def _smlad(w: CWriter, acc: str, j: int, tag: str = "") -> None:
    w(f"{acc} = __smlad(xl{tag}, w{j}l, {acc});")
    w(f"{acc} = __smlad(xh{tag}, w{j}h, {acc});")


def tiles(n: int, size: int) -> list[tuple[int, int, int]]:
    """(count, start, width) of the full tiles of ``size`` over ``n`` and of the remainder."""
    full, rest = divmod(n, size)
    out = [(full, 0, size)] if full else []
    if rest:
        out.append((1, full * size, rest))
    return out
