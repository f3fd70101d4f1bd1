"""The im2col matrix tile on Helium over an int8 scratch (isa/mve/__init__.py; the family is
int8/conv_mcu.py), for convs whose input is int8: the scratch keeps its geometry (one
``int64_t`` per reduction quad and column, ``stride`` columns a quad, int8/im2col.py) but a
quad's four entries are bytes, in the low word (``QUAD``), so VMLADAV sums 16 products an
instruction instead of the int16 core's 8 (isa/mve/matrix.py).

Per 16 reduction steps and tile: each weight row is one load of 16 int8 (``vldrbq_s8``, natural
order), each column one 32-bit gather of its four quads' low words (``vldrwq_gather_base_s32``:
a vector of the four addresses, stepped once a pass, the column an immediate) and each (row,
column) one ``vmladavaq_s8``. A reduction of 4, 8 or 12 (mod 16) ends with one step whose
gather lanes and weight bytes past it are zeroed by a predicate (``opfuse_pred``). The fill's
channel runs (``fill_gather``) gather eight channels as int16 and scatter them as bytes into the
two quads' low words. The portable C in the ``#else`` reads the same bytes; every sum is exact
in int32, so the integers are the int16 core's."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.base import QUAD
from opfuse.backends.c.isa.mve.fill import MAX_OFFSET
from opfuse.backends.c.isa.mve.matrix import reduction_step

LANES = 16  # int8 lanes of a vector: four quads
BYTE = "((uint32_t)(uint8_t)({}) << {})"
QUAD8 = "(int64_t)(" + " | ".join(BYTE.format("{}", 8 * i) for i in range(QUAD)) + ")"


def pad(zx: int) -> str:
    """Four entries of ``zx`` as one scratch int64_t (the low word's bytes)."""
    b = zx & 0xFF
    return f"(int64_t)0x{b:02x}{b:02x}{b:02x}{b:02x}u" if zx else "0"


def emit_core(w: CWriter, *, rows: int, cols: int, stride: int, kp: int, col: str,
              wrow: str) -> None:
    """Declare ``int32_t a{j}_{q}`` for ``j < rows``, ``q < cols``: the sum over the reduction of
    scratch column ``q`` (``col``: one int64_t quad per column, four int8 in its low word,
    ``stride`` columns) times weight row ``j`` (``wrow`` + ``j*kp`` bytes)."""
    acc = [[f"a{j}_{q}" for q in range(cols)] for j in range(rows)]
    w(f"int32_t {', '.join(f'{a} = 0' for r in acc for a in r)};")
    w.open("")
    w(f"const int64_t *cp = {col};")
    w(f"const int8_t *wp = {wrow};")
    w("#ifdef OPFUSE_MVE")
    blocks, rest = divmod(kp, LANES)
    # the four quads of column 0 a pass, 8*stride bytes apart; the other columns by immediate
    w(f"uint32x4_t at = vaddq_n_u32(vmulq_n_u32(vidupq_n_u32(0u, 1), {stride * 8}u), "
      "(uint32_t)(uintptr_t)cp);")
    # the fill's stores before the gathers: gcc sees no memory read in a gather from a vector
    # of addresses, so the addresses pass through the barrier
    w('__asm__ volatile ("" : "+w" (at) : : "memory");')
    if blocks:
        w.open(f"for (int kb = 0; kb < {blocks}; ++kb, wp += {LANES})")
        reduction_step(w, acc, kp, "vldrbq_s8(wp + {})",
                       lambda q: f"vldrwq_gather_base_s32(at, {q * 8})", "s8")
        w(f"at = vaddq_n_u32(at, {LANES // QUAD * stride * 8}u);")
        w.close()
    if rest:
        w.open("")
        w(f"const mve_pred16_t pk = opfuse_pred(0x{(1 << rest) - 1:04x}u);")
        reduction_step(w, acc, kp, "vldrbq_z_s8(wp + {}, pk)",
                       lambda q: f"vldrwq_gather_base_z_s32(at, {q * 8}, pk)", "s8")
        w.close()
    w("#else")
    w.open(f"for (int kb = 0; kb < {kp // QUAD}; ++kb, cp += {stride}, wp += {QUAD})")
    for q in range(cols):
        w.open("")
        w(f"const int32_t e = (int32_t)cp[{q}];")
        for j in range(rows):
            r = j * kp
            w(f"{acc[j][q]} += (int8_t)e*wp[{r}] + (int8_t)(e >> 8)*wp[{r + 1}]"
              f" + (int8_t)(e >> 16)*wp[{r + 2}] + (e >> 24)*wp[{r + 3}];")
        w.close()
    w.close()
    w("#endif")
    w.close()


def fill_gather(w: CWriter, *, src: str, xct: str, ch: object, count: int, dst: str,
                stride: int, quad: Callable[[str], None], ch_max: int | None = None) -> bool:
    """As isa/mve/fill.py's, into the byte quads: channels ``0 .. count`` (a multiple of 4) of
    ``src`` into ``dst`` (``stride`` quads a step), eight a gather (int16 lanes) and one byte
    scatter into two quads' low words; False where the gather does not apply."""
    bound = ch if isinstance(ch, int) else ch_max  # ch a C expression: a cascade's ring
    if bound is None or 7 * bound > MAX_OFFSET or count < 8 or xct != "int8_t":
        return False
    w("#ifdef OPFUSE_MVE")
    w.open("")
    step = f"{ch}u" if isinstance(ch, int) else f"(uint16_t)({ch})"
    w(f"const uint16x8_t go = vmulq_n_u16(vidupq_n_u16(0u, 1), {step});")
    # bytes 0-3 of the first quad, then of the one stride quads on
    w("const uint16x8_t so = vaddq_m_n_u16(vidupq_n_u16(0u, 1), vidupq_n_u16(0u, 1), "
      f"{stride * 8 - 4}u, opfuse_pred(0xff00u));")
    w.open(f"for (int ic = 0; ic + 8 <= {count}; ic += 8, {dst} += {2 * stride})")
    w(f"vstrbq_scatter_offset_s16((int8_t *){dst}, so, "
      f"vldrbq_gather_offset_s16({src} + ic*{ch}, go));")
    w.close()
    if count % 8:
        w.open("")
        quad(str(count - 4))
        w(f"{dst} += {stride};")
        w.close()
    w.close()
    w("#else")
    w.open(f"for (int ic = 0; ic < {count}; ic += 4, {dst} += {stride})")
    quad("ic")
    w.close()
    w("#endif")
    return True
