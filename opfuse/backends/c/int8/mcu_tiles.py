"""The matrix core's tiles and scratch on Cortex-M (int8/conv_mcu.py): how many output pixels a
tile holds (a layer-by-layer band, or a cascade member's row in tiles that cover it exactly), and
where the im2col scratch ``col`` lives (the stack, or a free arena gap during the kernel)
(docs/architecture.md, "int8 matrix kernels on Cortex-M").
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.tensors import Params

# The register tile, measured under QEMU on kws_ref_model (docs/architecture.md): 6 pixels x 1
# channel beat 4x1, 5x1, 3x2 and 2x2 (CMSIS-NN's) on 1x1 and im2col'd convs.
CONV_COLS, CONV_ROWS = 6, 1  # a conv's register tile: output pixels x output channels
# the scratch's bound on the stack, where the arena has no free gap during the conv: the
# layer-by-layer kernels' own tiles were 1-4 KB (acc[8][32] int32 is 1 KB)
STACK_SCRATCH_BYTES = 1024
# a cascade member's row is one band: with the arena at its cascaded peak there is no free gap,
# and 1 KB held only 1-3 columns of ResNet-8's 3x3 convs over 16-64 channels (+40-73% instructions
# on its second and third cascades). It may spend up to half the arena its cascades save, at most this
# (6 columns x 576 int16 reduction steps = 6,912 bytes), so arena + stack still shrink.
CASCADE_SCRATCH_BYTES = 8192


STACK_SCRATCH = "int64_t col[{}];  /* im2col quads (im2col.py) */"
ARENA_SCRATCH = "int64_t *col = (int64_t *)(AB + {});  /* im2col quads (im2col.py), {} bytes */"


def declare_scratch(w: CWriter, params: Params, quads: int) -> None:
    """One ``col`` for the whole kernel body, sized for its largest user (a cascade's members run
    one after another and share it): on the stack up to STACK_SCRATCH_BYTES (addressed from SP,
    it costs no register: kws's first conv runs 13% faster than from the arena), larger in arena
    bytes no tensor the memory plan keeps live during this kernel occupies (so
    OPFUSE_ARENA_BYTES holds it at no cost), else on the stack."""
    first = next((line for line in w.lines if line.strip()), None)
    top = "    " * w.depth if first is None else first[:len(first) - len(first.lstrip())]
    at = next((i for i, line in enumerate(w.lines) if line.startswith(top + "int64_t ")
               and "im2col quads" in line), None)
    if at is not None:
        quads = max(quads, _declared_quads(w.lines[at]))
    offset = None if quads * 8 <= STACK_SCRATCH_BYTES else _arena_gap(params, quads * 8)
    line = top + (STACK_SCRATCH.format(quads) if offset is None
                  else ARENA_SCRATCH.format(offset, quads * 8))
    if at is None:
        w.lines.insert(0, line)
    else:
        w.lines[at] = line


def _declared_quads(line: str) -> int:
    if "[" in line.split("/*")[0]:
        return int(line.split("[")[1].split("]")[0])
    return int(line.split("/*")[1].split(",")[1].split()[0]) // 8


def _arena_gap(params: Params, nbytes: int) -> int | None:
    """The lowest 8-byte aligned arena offset where ``nbytes`` overlap no tensor live at the
    kernel's step (``Store.step``), within the plan's peak; None without one."""
    store = params.store
    step = getattr(store, "step", None)
    if step is None:
        return None
    plan = store.plan
    busy = sorted((plan.offsets[t.name], plan.offsets[t.name] + t.aligned_bytes)
                  for t in plan.tensors if t.live_at(step) and t.name in plan.offsets)
    offset = 0
    for lo, hi in busy:
        if offset + nbytes <= lo:
            break
        offset = max(offset, -(-hi // 8) * 8)
    return offset if offset + nbytes <= plan.peak_bytes else None


def stack_budget(params: Params, cascaded: bool) -> int:
    """The stack scratch a conv may declare: STACK_SCRATCH_BYTES, a cascade member also half
    the arena bytes the cascades save (``Store.cascade_saving``) up to CASCADE_SCRATCH_BYTES."""
    if not cascaded:
        return STACK_SCRATCH_BYTES
    saving = getattr(params.store, "cascade_saving", 0)
    return min(CASCADE_SCRATCH_BYTES, max(STACK_SCRATCH_BYTES, STACK_SCRATCH_BYTES + saving // 2))


def _core_cost(width: int, cols: int, tail: bool) -> int:
    """About the core's instructions per four reduction steps over a row of ``width`` in tiles of
    ``cols``: 3 + 3c a tile of c columns (a weight word, two SXTB16, per column an LDRD and two
    SMLAD); a partial last tile pays in full, or (``tail``) for its own width."""
    full, rest = divmod(width, cols)
    return full * (3 + 3 * cols) + (3 + 3 * (rest if tail else cols) if rest else 0)


def row_tile(width: int) -> int:
    """Pixels per tile along one output row (a cascade member's band): the tile of 4-6 that
    computes the row in the fewest core instructions, a partial last tile paying in full: a row
    of 8 or 16 takes 4 (none wasted) over 6, which repeats 4 or 2 pixels; 96 takes 6."""
    if width <= CONV_COLS:
        return width
    return min(range(CONV_COLS, 3, -1), key=lambda c: _core_cost(width, c, False))


def row_tiles(width: int, most: int = CONV_COLS) -> tuple[int, int]:
    """(cols, tail): a row in tiles of ``cols`` (at most ``most``) and a last one of ``tail``
    columns (0: none), covering it exactly in the fewest core instructions; at equal cost
    without a tail (its core is code of its own). ResNet-8's rows: 32 = 5x6 + 2 and 16 = 2x6 + 4
    (114 and 57 against 120 and 60 in fours), 8 = 2x4."""
    if width <= most:
        return width, 0
    cols = min(range(most, 0, -1), key=lambda c: (_core_cost(width, c, True), width % c != 0))
    return cols, width % cols


def columns(params: Params, band: int, kp: int, cascaded: bool = False) -> tuple[int, int]:
    """(cols, tail): CONV_COLS where the scratch fits the stack budget or the arena has room for
    it during this kernel; else as many as the budget holds, so the stack grows by no more than
    the layer-by-layer kernels' own tiles did (a cascade: than half what its rings save). A
    cascade row may end in a narrower tile (``_tailed``)."""
    cols = row_tile(band) if cascaded else min(CONV_COLS, band)
    budget = stack_budget(params, cascaded)
    if cols * kp * 2 <= budget or _arena_gap(params, cols * kp * 2) is not None:
        return (_tailed(params, band, kp, cols) if cascaded else None) or (cols, 0)
    return max(1, min(cols, budget // (kp * 2))), 0


@dataclass
class RowTails:
    """What a pass of emit.generate lets cascade rows end in narrower tiles with: ``cap`` None
    (the first pass) writes none but records whether one would pay (``wanted``); the second
    pass's ``cap`` is the first pass's deepest stack scratch."""

    cap: int | None = None
    wanted: bool = False


def _tailed(params: Params, band: int, kp: int, cols: int) -> tuple[int, int] | None:
    """A cascade row in wider tiles and a narrower last one (``row_tiles``) where the ISA's core
    can end a row so (``IsaKernels.matrix_tail``) and it runs fewer instructions than tiles of
    ``cols``, its scratch on a stack no deeper than the build's deepest kernel without tails
    (``Store.row_tails``) or in a free arena gap; else None."""
    tails = getattr(params.store, "row_tails", None)
    if tails is None or not kernels(params.store.isa).matrix_tail:
        return None
    for most in range(CONV_COLS, cols, -1):
        wide, tail = row_tiles(band, most)
        nbytes = wide * kp * 2
        if _core_cost(band, wide, True) >= _core_cost(band, cols, False):
            continue
        tails.wanted = True
        if tails.cap is not None and (nbytes <= tails.cap
                                      or _arena_gap(params, nbytes) is not None):
            return wide, tail
    return None
