"""The plan of a float Conv with constant weights in the generated C (opfuse/backends/c/conv.py
layer by layer, cascade.py's members): which loop nest computes it, from its geometry and whether
the target's FPU is scalar (``Isa.scalar``: Cortex-M4/M7/M33).

Paths: ``depthwise`` (one input and one output channel a group: dwconv.py, its rows read in
place or copied into a band, ``depthwise_in_place``);
``pixels`` (a scalar FPU: pixel tiles, pixeltiles.py, one output pixel's ``lanes`` channels as
scalar sums kept in registers over the whole reduction, layer by layer and cascaded, for a
pointwise conv and a spatial one summing at most ``PIXEL_REDUCTION`` input channels x taps, a
stem: a vector unit's tiles keep their sums in arrays, which on a scalar FPU gcc loads and stores
around every multiply-add; a spatial conv with a larger reduction takes the direct core, whose
tile reuses each loaded input across the kernel's columns: pretrainedResnet.tflite's 3x3 convs
over 16-64 channels ran 10-20% more instructions as pixel tiles on cortex-m7, its stem over 3
channels 2% fewer); on a vector unit, layer by layer, a stem (at most ``STEM_TAPS`` input channels
x taps, rows at least ``STEM_ROW`` wide, not the pointwise GEMM's) as the same pixel tiles of
``STEM_LANES`` channels, every tap unrolled: the column loop is then the one gcc vectorizes, each
store a contiguous run of an output row; ``columns`` (backends/c/pointwise.py: ``lanes`` channels
x ``columns`` columns of a row a tile, vectorized over the columns): layer by layer on a vector
unit a 1x1 stride-1 unpadded conv of one group over at least ``PIXELS_1X1`` pixels
(``POINTWISE_LANES`` x ``POINTWISE_COLUMNS``, its plane read as one row), and a cascade member
on a vector unit, 1x1 (``COLUMN_LANES`` x ``COLUMN_WIDTH`` of a ring row, ``FMA_COLUMN_LANES`` x
``FMA_COLUMN_WIDTH`` with the ISA's register tile) or spatial
(``SPATIAL_LANES`` x ``SPATIAL_WIDTH`` of its line buffer); ``channels`` (a member's 1x1 conv
on rows narrower than ``NARROW``, vectorized over ``lanes`` channels, ``columns`` columns a
tile: cascade_rows.py); ``direct`` (a member whose line buffer would exceed ``LINE_FLOATS``, or
a scalar FPU's large spatial reduction: convdirect.py's core); ``vector``: layer by layer on a
vector unit, every other conv: convdirect.py's register tile (conv.py). A conv whose weights are
a runtime input, or that ends in a pool, has no plan here: ``plan_rows`` gives its column tiles
over a line buffer (backends/c/convrows.py), on every target.
"""

from __future__ import annotations

from dataclasses import dataclass

from opfuse.kernelplan.conv8 import ConvGeom

PIXEL_OCB = (16, 8)  # output channels per pixel tile, the first that divides the group's
# input channels x taps at most this many: the whole reduction unrolled; more, a loop over the input
# channels, each one's taps unrolled. mobilenet_v2_128_0.5 cascaded on cortex-m7 with 32: 116,708 B
# of code, 54,569,479 instructions; 8: 49,468 B, 54,254,005; 0: 44,372 B, 54,662,744
UNROLL_TAPS = 8
PIXEL_REDUCTION = 32  # a spatial conv summing more than this many input channels x taps: direct
LINE_FLOATS = 16384  # a row's line buffer (stack) budget; beyond it: the direct core
NARROW = 16  # a member's 1x1 rows at least this wide take the column tile (vector units)
PIXELS_1X1 = 256  # a vector unit's 1x1 convs over at least this many pixels: the GEMM over pixels
STEM_TAPS, STEM_ROW, STEM_LANES = 32, 16, 8  # a vector unit's stem as pixel tiles (docstring)
STEM_ALIGN = 8  # its line buffer's phase rows: whole 32-byte vectors, the buffer aligned
COLUMN_LANES, SPATIAL_LANES, CHANNEL_LANES = 4, 8, 16  # output channels of a member's tiles
# ... and their columns (4 x 24 and 16 x 4 keep their sums in AVX2's 16 registers; spatial 8 x 16)
COLUMN_WIDTH, SPATIAL_WIDTH, CHANNEL_WIDTH = 24, 16, 4
POINTWISE_LANES, POINTWISE_COLUMNS = 8, 32  # a pointwise conv's tile layer by layer
# a 1x1 member's tile where the ISA keeps the sums in registers (``fma``): 8 x 16 is one zmm a
# channel; 4 x 24 (a masked second zmm) ran mobilenet_v2_128_0.5's first cascade 0.82x, 8 x 16
# 1.12-1.14x, 4 x 16 1.12x, 8 x 32 1.08x, 16 x 16 0.97x (Zen 5, against 4 x 24 without it)
FMA_COLUMN_LANES, FMA_COLUMN_WIDTH = 8, 16
STRIDED_ROW, NARROW_ROW = 6, 3  # a vector unit's depthwise conv onto rows this narrow (at a
# horizontal stride > 1, at stride 1) reads its rows in place (depthwise_in_place)
VECTOR_ROW_TAPS = 49  # an ISA's depthwise rows in vectors: kernels up to 7x7 (isa/x86/floatdw.py)
DIRECT_LANES = 8  # the direct core's (convdirect.py) last block padded to a multiple of this


@dataclass(frozen=True)
class FloatConvPlan:
    path: str
    lanes: int = 0  # output channels a tile (pixels, columns, channels)
    unrolled: bool = False  # pixels: every input channel's taps unrolled (no loop over them)
    align: int = 1  # pixels: a line-buffer phase row rounded up to this many floats, aligned
    columns: int = 0  # columns, channels: the columns of a row a tile
    in_place: bool = False  # depthwise: rows read in place (dwrow.py), no band copy
    vectors: bool = False  # depthwise: the ISA's rows in vectors, read in place, no band copy


def depthwise_in_place(g: ConvGeom, scalar: bool) -> bool:
    """Whether a depthwise conv reads its source rows in place (the row nest of dwrow.py) rather
    than copying them into a zero-padded band (dwconv.py), layer by layer and as a cascade member
    alike: on a scalar FPU at any stride, which gains nothing from the band's copy (cortex-m7,
    mobilenet_v2_128_0.5 cascaded: 99.35M instructions with it, 95.77M in place at stride 1;
    then 54.09M -> 51.59M with stride 2 in place too; layer by layer 57.94M banded, 52.02M in
    place); on a vector unit only onto rows of at most ``STRIDED_ROW`` columns at a horizontal
    stride > 1 or ``NARROW_ROW`` at stride 1, where the band's zero fill (and phase copy)
    outweigh its vectors.
    Elsewhere a vector unit keeps the band: its flat loop spans a band's rows, where the row
    nest pays each row's border columns and its vector loop's scalar remainder (x86 -march=native,
    every depthwise conv in place, layer by layer, against the band: mobilenet_v2_128_0.5 0.47x,
    vww_96_float 0.85x, Ultraface 1.09x; per kernel 0.22-0.75x on rows of 8-48 columns at
    stride 1, 1.4-2.2x on Ultraface's rows of 60-120, 1.27-1.78x at stride 2 onto rows of 4-6:
    docs/measurements.md)."""
    return scalar or g.ow <= (STRIDED_ROW if g.s[1] > 1 else NARROW_ROW)


def depthwise_vectors(g: ConvGeom, rows: bool, clamps: bool) -> bool:
    """Whether a float depthwise conv runs as the ISA's output rows in vectors, read in place
    (``IsaKernels.depthwise_float``, isa/x86/floatdw.py; its portable C, band or row nest, then
    only in the ``#else``): where the ISA has them (``rows``: the ``[isa]`` record's
    ``depthwise_rows``), its epilogue is clamps alone (``clamps``: Relu / Clip with constant
    bounds, or none), its horizontal stride 1 or 2 and its kernel at most ``VECTOR_ROW_TAPS``
    taps. The emitter (dwconv.py) and the cost (cost/fwork.py) both ask this."""
    return rows and clamps and g.s[1] in (1, 2) and g.k[0] * g.k[1] <= VECTOR_ROW_TAPS


def oc_blocks(ocg: int) -> list[tuple[int, int, int]]:
    """(first channel, channels, padded width) of the direct core's output-channel blocks of
    one group (convdirect.py's register tiles, and its weights' packing)."""
    full = 32 if ocg >= 32 else 16 if ocg >= 16 else 0
    blocks = []
    start = 0
    if full:
        while ocg - start >= full:
            blocks.append((start, full, full))
            start += full
    rest = ocg - start
    if rest:
        blocks.append((start, rest, -(-rest // DIRECT_LANES) * DIRECT_LANES))
    return blocks


def line_floats(g: ConvGeom) -> int:
    """Floats of a row's line buffer (0: a 1x1 stride-1 unpadded conv reads its rows in place)."""
    if g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0):
        return 0
    return g.c * g.k[0] * g.s[1] * line_width(g, g.ow)


def line_width(g: ConvGeom, w_out: int) -> int:
    """One phase of a line-buffer row: ``w_out`` columns plus the kernel's reach in that phase."""
    return w_out + ((g.k[1] - 1) * g.d[1]) // g.s[1]


def pixel_lanes(ocg: int) -> int:
    """Sums per pixel tile for ``ocg`` output channels a group: 16 (and the tap's input: 17 of
    the FPU's 32 single registers) where 16 divide them, else 8 (no zero-padded channels)."""
    return next((n for n in PIXEL_OCB if ocg % n == 0), PIXEL_OCB[-1])


def plan_convf(g: ConvGeom, scalar: bool, member: bool = False, fma: bool = False,
               rows: bool = False, clamps: bool = False) -> FloatConvPlan:
    """The path of a float conv with constant weights (module docstring); ``scalar``: the
    target's FPU has no vectors; ``member``: a cascade member's, one output row a step;
    ``fma``: the ISA keeps a column tile's sums in registers (``IsaKernels.fma_tile``);
    ``rows``, ``clamps``: a depthwise conv's rows in vectors (``depthwise_vectors``)."""
    if g.icg == 1 and g.ocg == 1:
        return FloatConvPlan("depthwise", in_place=depthwise_in_place(g, scalar),
                             vectors=depthwise_vectors(g, rows, clamps))
    if line_floats(g) > LINE_FLOATS:
        return FloatConvPlan("direct" if member else "vector")
    if scalar and g.k != (1, 1) and g.icg * g.k[0] * g.k[1] > PIXEL_REDUCTION:
        return FloatConvPlan("direct" if member else "vector")
    if scalar:
        return FloatConvPlan("pixels", pixel_lanes(g.ocg),
                             g.icg * g.k[0] * g.k[1] <= UNROLL_TAPS)
    if not member:
        if _pointwise(g):
            return FloatConvPlan("columns", POINTWISE_LANES, columns=POINTWISE_COLUMNS)
        return FloatConvPlan("pixels", STEM_LANES, True, STEM_ALIGN) if _stem(g) else FloatConvPlan("vector")
    if g.k[0] * g.k[1] > 1:
        return FloatConvPlan("columns", SPATIAL_LANES, columns=SPATIAL_WIDTH)
    if g.ow < NARROW:
        return FloatConvPlan("channels", CHANNEL_LANES, columns=CHANNEL_WIDTH)
    if fma:
        return FloatConvPlan("columns", FMA_COLUMN_LANES, columns=FMA_COLUMN_WIDTH)
    return FloatConvPlan("columns", COLUMN_LANES, columns=COLUMN_WIDTH)


def plan_rows(g: ConvGeom, packed: bool) -> FloatConvPlan:
    """The column tiles of a conv whose weights are a runtime input (not ``packed``: read in
    ONNX's layout, so ``lanes`` divides the group's channels) or that ends in a pool, layer by
    layer over a line buffer (backends/c/convrows.py): a member's spatial tile, ``SPATIAL_LANES``
    x ``SPATIAL_WIDTH``; where the group has fewer channels, fewer lanes and as many more
    columns (the tile's sums as many)."""
    lanes = SPATIAL_LANES if packed and g.ocg >= SPATIAL_LANES else \
        next(n for n in (SPATIAL_LANES, 4, 2, 1) if g.ocg % n == 0)
    return FloatConvPlan("columns", lanes, columns=SPATIAL_LANES * SPATIAL_WIDTH // lanes)


def _pointwise(g: ConvGeom) -> bool:
    """A vector unit's conv taken layer by layer as column tiles over its plane."""
    return (g.k == (1, 1) and g.s == (1, 1) and g.p == (0, 0) and g.group == 1
            and g.oh * g.ow >= PIXELS_1X1 and g.oc % POINTWISE_LANES == 0)


def _stem(g: ConvGeom) -> bool:
    """A vector unit's conv taken layer by layer as pixel tiles: few input channels x taps."""
    return (g.group == 1 and g.icg * g.k[0] * g.k[1] <= STEM_TAPS and g.ow >= STEM_ROW
            and g.oc >= STEM_LANES and g.s[1] <= 4)
