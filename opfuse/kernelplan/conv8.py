"""The plan of an int8 Conv in the generated C's templates (opfuse/backends/c/int8/conv.py and
depthwise_dsp.py) and the cost model's work of it (opfuse/cost/cwork.py): which path computes it,
its register block of output channels, its pointwise pixel tile, and for a depthwise conv the
output columns summed in SIMD groups of ``PAIR`` pixels (a group's tap row is one word of four
input bytes per even offset: taps ``k`` and ``k + 2`` of a pixel pair on one word's even or odd
bytes, an unpaired tap on one lane).

Paths (each with its own rates in ``[perf.int8c]``): ``conv_lanes`` (a vector over a group's
output channels: short rows, or a small pointwise plane; the portable C writes it as pointwise.py's
channel tiles, ``ocb`` channels x ``tile`` columns of a row or plane), ``depthwise`` (SIMD pairs per row),
``pointwise`` (pixel tiles of ``PIX_TILE``), ``conv_rows`` (a vector along each output row, per
tap: every other conv; the portable C writes it as column tiles over a line buffer).
"""

from __future__ import annotations

from dataclasses import dataclass

OCB_CHOICES = (8, 4, 2, 1)  # output channels per register block
PIX_TILE = 64  # output pixels per tile of the pointwise path
LANES = 16  # a group with a multiple of this many output channels can vectorize over them
SHORT_ROW = 32  # output rows shorter than this vectorize over channels instead
PAIR = 2  # output pixels per depthwise SIMD group: 3x3 stride 1 then needs one word per tap row
MAX_K = 8  # widest kernel row the depthwise core is written for
CHANNEL_WIDTH = 4  # output columns of a conv_lanes channel tile (``LANES`` channels each)


@dataclass(frozen=True)
class ConvGeom:
    """A conv's geometry (1-D as 2-D with a height of 1); ``p``: the top and left pads."""

    n: int
    c: int
    ih: int
    iw: int
    oc: int
    oh: int
    ow: int
    group: int
    k: tuple[int, int]
    s: tuple[int, int]
    d: tuple[int, int]
    p: tuple[int, int]

    @property
    def icg(self) -> int:
        return self.c // self.group

    @property
    def ocg(self) -> int:
        return self.oc // self.group


@dataclass(frozen=True)
class Conv8:
    """An int8 conv as the templates see it: its geometry, its bottom and right pads, whether
    its activations are int8 (uint8 keeps the row path) and its rank (3: 1-D)."""

    g: ConvGeom
    pads_end: tuple[int, int] = (0, 0)
    int8_input: bool = True
    rank: int = 4

    @property
    def pointwise(self) -> bool:
        g = self.g
        return g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0) and not any(self.pads_end)


@dataclass(frozen=True)
class ConvPlan:
    path: str
    ocb: int = 1  # output channels per register block (pointwise, conv_rows, conv_lanes)
    tile: int = 0  # pixels per pointwise tile, columns per conv_lanes channel tile
    dw_columns: int = 0  # output columns of a row in SIMD groups (depthwise)


def is_depthwise(conv: Conv8) -> bool:
    """Depthwise with multiplier 1, 2-D, undilated, int8 activations, a row of at most
    ``MAX_K`` taps: the SIMD-pairs core."""
    g = conv.g
    return (g.group == g.c == g.oc and g.group > 1 and g.d == (1, 1) and conv.int8_input
            and g.k[1] <= MAX_K and conv.rank == 4)


def uses_lanes(conv: Conv8) -> bool:
    """Short rows (or a small pointwise plane) vectorize over output channels."""
    g = conv.g
    return g.ocg % LANES == 0 and (g.oh * g.ow < PIX_TILE if conv.pointwise else g.ow < SHORT_ROW)


def plan_conv8(conv: Conv8, member: bool = False) -> ConvPlan:
    """The path the templates take, in their order of choice; ``member``: a cascade member's,
    which computes one output row a call (a pointwise one too, so no pixel tiles)."""
    g = conv.g
    if is_depthwise(conv):
        first, groups = interior(g.iw, g.k[1], g.s[1], g.p[1])
        return ConvPlan("depthwise", dw_columns=min(g.ow, groups * PAIR))
    if (g.ocg % LANES == 0 and g.ow < SHORT_ROW) if member else uses_lanes(conv):
        return ConvPlan("conv_lanes", LANES, CHANNEL_WIDTH)
    ocb = next(b for b in OCB_CHOICES if g.ocg % b == 0)
    if conv.pointwise and not member:
        return ConvPlan("pointwise", ocb, min(PIX_TILE, g.oh * g.ow))
    return ConvPlan("conv_rows", ocb)


@dataclass(frozen=True)
class Tap:
    """One multiply-accumulate instruction of an output pixel ``out`` of a depthwise group: the
    word at byte ``word`` of the row (from the group's first input column), its ``e`` or ``o``
    half, both lanes against a weight pair (``lane`` "pair") or one lane against a single
    weight."""

    out: int
    word: int
    odd: bool
    lane: str  # "pair", "lo" or "hi"
    weight: int  # index in the row's packed weights (pairs first, then singles)


def tap_pairs(kw: int) -> tuple[list[tuple[int, int]], list[int]]:
    """The row's taps as pairs (k, k + 2) and singles: (0, 2), (1, 3), (4, 6), (5, 7)..."""
    pairs, singles, used = [], [], set()
    for k in range(kw):
        if k in used:
            continue
        if k + 2 < kw and k + 2 not in used:
            pairs.append((k, k + 2))
            used |= {k, k + 2}
        else:
            singles.append(k)
            used.add(k)
    return pairs, singles


def row_schedule(kw: int, stride: int, pair: int = PAIR) -> list[Tap]:
    """The instructions of one tap row for ``pair`` output pixels (module docstring)."""
    pairs, singles = tap_pairs(kw)
    taps: list[Tap] = []
    for d in range(pair):
        for j, (k, _) in enumerate(pairs):
            i = d * stride + k
            taps.append(Tap(d, i - (i % 2), bool(i % 2), "pair", j))
    words = {t.word for t in taps}
    for d in range(pair):
        for j, k in enumerate(singles, start=len(pairs)):
            i = d * stride + k
            lo, hi = i - (i % 2), i - (i % 2) - 2  # x[i] is lane lo of word i, lane hi of word i-2
            if hi >= 0 and hi in words and lo not in words:
                taps.append(Tap(d, hi, bool(i % 2), "hi", j))
            else:
                taps.append(Tap(d, lo, bool(i % 2), "lo", j))
                words.add(lo)
    return taps


def reach(kw: int, stride: int, pair: int = PAIR) -> int:
    """Bytes a group reads from its first input column (its last word's end)."""
    return max(t.word for t in row_schedule(kw, stride, pair)) + 4


def interior(iw: int, kw: int, sw: int, pw: int, pair: int = PAIR) -> tuple[int, int]:
    """(first column, number of groups) of the output columns whose groups read only bytes of
    the row: a pixel's window starts at ``ow * sw - pw``."""
    first = -(-pw // sw)
    span = reach(kw, sw, pair)
    # the group at ow0 reads columns ow0*sw - pw .. ow0*sw - pw + span - 1 < iw
    last = (iw - span + pw) // sw if iw - span + pw >= 0 else -1
    groups = max(0, (last - first) // pair + 1) if last >= first else 0
    return first, groups


GEMV_LANES = 16  # output channels per vector of the GEMV's packing (a zmm of int32)
GEMV_BLOCK = 8  # vectors of output channels per block, at most: one weight stream each
GEMV_ACC = 16  # accumulators a block keeps in flight (of zmm's 32 registers)
GEMV_YMM_ACC = 8  # ymm: a block in parts of this many vectors (16 registers without AVX-512)
GEMV_CHAINS = 8  # interleaved chains over K, at most (then their sums are added)


@dataclass(frozen=True)
class GemvPlan:
    """A batch-1 int8 fully connected layer (one row of ``k`` inputs, ``n`` outputs) as a GEMV:
    the output channels, padded to vectors of GEMV_LANES, in ``blocks`` of (first channel,
    channels) of at most GEMV_BLOCK vectors, balanced; a block streams its weights over all of
    K (packed ``[K/4][channels][4]`` per block, in block order) with its accumulators in
    ``chains(vectors)`` interleaved chains of 4-byte steps, so that about GEMV_ACC
    vpdpbusd are independent (a narrow layer, 8 or 16 outputs, would otherwise wait on one
    chain's latency)."""

    n: int
    k: int
    blocks: tuple[tuple[int, int], ...]

    @property
    def k4(self) -> int:
        return -(-self.k // 4)

    def chains(self, vectors: int, acc: int = GEMV_ACC) -> int:
        """Chains over K for a block of ``vectors`` accumulators, ``acc`` in flight."""
        return max(1, min(acc // max(vectors, 1), self.k4, GEMV_CHAINS))


GEMV_ISAS = ("x86",)  # the ISA modules that write the GEMV (isa/x86/gemv.py)


def has_gemv8(isa_name: str) -> bool:
    """The ISA module ``isa_name`` (a target's ``[isa]`` name) writes batch-1 int8 fully connected
    layers as the GEMV (under TFLite's rounding: it requantizes in vectors); the cost model
    (opfuse/cost/cwork.py) then counts them its way."""
    return isa_name in GEMV_ISAS


def uses_gemv8(rows: int) -> bool:
    """An int8 fully connected layer (Gemm/MatMul with constant weights) of one row: the conv
    core's register block of up to 8 pixels would hold one, so it takes the GEMV."""
    return rows == 1


def gemv_blocks(n: int, k: int) -> GemvPlan:
    """The GEMV's blocking of ``n`` outputs over ``k`` inputs (GemvPlan)."""
    nv = -(-n // GEMV_LANES)
    count = -(-nv // GEMV_BLOCK)
    blocks, v0 = [], 0
    for b in range(count):
        vs = nv // count + (1 if b < nv % count else 0)
        blocks.append((v0 * GEMV_LANES, vs * GEMV_LANES))
        v0 += vs
    return GemvPlan(n, k, tuple(blocks))
