"""The im2col matrix tile on Helium (isa/mve/__init__.py): the same int16 scratch as Armv7E-M's
(int8/im2col.py: per column and reduction quad one int64_t of four int16 entries, ``stride``
columns a quad) times int8 weight rows in their natural order (no SMLAD permutation).

Per eight reduction steps and tile: each weight row is one widening load (``vldrbq_s16``: 8 int8
to int16 lanes), each column one 64-bit gather of its two quads (``vldrdq_gather_base_s64``: a
vector of the two addresses, stepped once a pass, the column an immediate) and
each (row, column) one ``vmladavaq_s16``: 8 int16 products
summed into the int32 accumulator. A reduction of 4 (mod 8) ends with one quad, its second
gather lane and its weights' upper lanes zeroed by a predicate (``opfuse_pred``). The
portable C in the ``#else`` reads the same bytes; both sums are exact in int32."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.armv7em.matrix import emit_portable
from opfuse.backends.c.isa.base import QUAD, padded


def weight_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` [N][K] (int) as the core reads them: [N][Kp] int8, zero-padded, natural order."""
    n, k = rows.shape
    out = np.zeros((n, padded(k)), np.int8)
    out[:, :k] = rows.astype(np.int8)
    return out


def emit_core(w: CWriter, *, rows: int, cols: int, stride: int, kp: int, col: str,
              wrow: str) -> None:
    """Declare ``int32_t a{j}_{q}`` for ``j < rows``, ``q < cols``: the sum over the reduction of
    scratch column ``q`` (``col``: one int64_t quad per column, ``stride`` columns) times weight
    row ``j`` (``wrow`` + ``j*kp`` bytes)."""
    acc = [[f"a{j}_{q}" for q in range(cols)] for j in range(rows)]
    w(f"int32_t {', '.join(f'{a} = 0' for r in acc for a in r)};")
    w.open("")
    w(f"const int64_t *cp = {col};")
    w(f"const int8_t *wp = {wrow};")
    w("#ifdef OPFUSE_MVE")
    octs, step = kp // (2 * QUAD), 2 * stride * 8
    # the addresses of column 0's two quads (64-bit lanes, the address in the low word), stepped
    # by one 32-bit vector add a pass; the other columns reach them by an immediate
    w("const uint32_t c0 = (uint32_t)(uintptr_t)cp;")
    w(f"uint64x2_t at = vreinterpretq_u64_u32(vsetq_lane_u32(c0 + {stride * 8}u, "
      "vsetq_lane_u32(c0, vdupq_n_u32(0u), 0), 2));")
    w(f"const uint32x4_t step = vsetq_lane_u32({step}u, vsetq_lane_u32({step}u, "
      "vdupq_n_u32(0u), 0), 2);")
    # the fill's stores before the gathers: gcc sees no memory read in a gather from a vector
    # of addresses, so the addresses pass through the barrier
    w('__asm__ volatile ("" : "+w" (at) : : "memory");')
    if octs:
        w.open(f"for (int kb = 0; kb < {octs}; ++kb, wp += {2 * QUAD})")
        reduction_step(w, acc, kp, "vldrbq_s16(wp + {})", lambda q: f"vldrdq_gather_base_s64(at, {q * 8})")
        w("at = vreinterpretq_u64_u32(vaddq_u32(vreinterpretq_u32_u64(at), step));")
        w.close()
    if kp % (2 * QUAD):
        w.open("")
        # the low 8 bytes: four int16 lanes, one int64 lane
        w("const mve_pred16_t p16 = opfuse_pred(0x00ffu), p64 = p16;")
        reduction_step(w, acc, kp, "vldrbq_z_s16(wp + {}, p16)",
              lambda q: f"vldrdq_gather_base_z_s64(at, {q * 8}, p64)")
        w.close()
    w("#else")
    emit_portable(w, acc, stride, kp, (0, 1, 2, 3))
    w("#endif")
    w.close()


def reduction_step(w: CWriter, acc: list[list[str]], kp: int, wload: str,
                   xload: Callable[[int], str], lanes: str = "s16") -> None:
    """One vector of reduction steps of the whole tile: eight int16 lanes (``s16``, the
    widened scratch) or sixteen int8 lanes (``s8``, isa/mve/narrow.py's byte scratch); the
    x vector comes from a 64-bit (s16) or 32-bit (s8) gather."""
    bits, wide = {"s16": (16, "s64"), "s8": (8, "s32")}[lanes]
    vec = f"int{bits}x{128 // bits}_t"
    rows, cols = len(acc), len(acc[0])
    w.open("")
    for j in range(rows):
        w(f"const {vec} w{j} = {wload.format(j * kp)};")
    for q in range(cols):
        w(f"const {vec} x{q} = vreinterpretq_{lanes}_{wide}({xload(q)});")
        for j in range(rows):
            w(f"{acc[j][q]} = vmladavaq_{lanes}({acc[j][q]}, x{q}, w{j});")
    w.close()
