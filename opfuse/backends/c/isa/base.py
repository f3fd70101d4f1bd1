"""What an ISA module gives the kernels (docs/isa.md): one frozen record of micro-kernel writers
and C text, the same fields for every instruction set, so a kernel family asks for "the int8 dot
product" or "the MatMul core's wider tile" and never names a CPU, a feature macro or a header.

Each writer emits its own preprocessor guard (the compiler's feature macros), with the portable C
in its ``#else``: one generated project builds with any compiler for any core, and the ISA record
of the target (opfuse/targets/isa.py) only decides which micro-kernels are written into it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from opfuse.backends.c.cgen import CWriter

# The matrix family's quad (int8/im2col.py, int8/conv_mcu.py and the ISAs' matrix cores): the
# reduction steps of one scratch word and of one weight word
QUAD = 4


def padded(k: int) -> int:
    """The reduction length rounded up to whole quads (the tail reads zeros)."""
    return -(-k // QUAD) * QUAD


# dot(w, acc, a, a_ctype, za, b, k): C adding sum((a[kk] - za) * b[kk]) for kk < k to int32
# ``acc``; ``a`` int8_t or uint8_t (``a_ctype``), ``b`` int8 weights (zero point 0).
DotWriter = Callable[[CWriter, str, str, str, int, str, int], None]


@dataclass(frozen=True)
class NarrowMatrix:
    """The matrix family over an int8 im2col scratch, for convs with int8 inputs: each scratch
    ``int64_t`` holds a quad's four entries as bytes (``quad``: its C format from the four
    entries; ``pad(zx)``: four z_x as a constant), read by ``core`` (as ``matrix_core``, over
    the same weight rows) and filled in channel runs by ``fill_gather`` (as ``fill_gather``)."""

    quad: str
    pad: Callable[[int], str]
    core: Callable[..., None]
    fill_gather: Callable[..., bool] | None = None


@dataclass(frozen=True)
class DepthwisePairs:
    """The int8 depthwise row's interior columns (dwrow.py) summed ``PAIR`` outputs at a time
    on the ISA's SIMD pairs. ``on`` / ``off`` open the branch that has them /
    the portable sums' branch; ``weights(w, g, guard)`` writes channel ``c``'s taps packed in
    pairs (``wp<kh>_<j>``) under ``guard`` (``weights_guard``); ``pointers(w, g, first)`` the row
    pointers ``p<kh>`` a group steps; ``group(w, g, step)`` the sums ``a0 ..`` of one group."""

    on: str
    off: str
    weights_guard: str
    weights: Callable[..., None]
    pointers: Callable[..., None]
    group: Callable[..., None]


# ONNX's rounding where no ISA has a faster form: rintf (a libm call where the FPU has no VRINTX,
# as Cortex-M4's) and the clamps in float
PORTABLE_ROUND_F = r"""static inline int32_t opfuse_quantize_f(float v) {
    v = rintf(v);
    v = v < -1073741824.0f ? -1073741824.0f : (v > 1073741824.0f ? 1073741824.0f : v);
    return (int32_t)v;
}
static inline int32_t opfuse_quantize_fr(float v) {
    return (int32_t)rintf(v);
}
"""


@dataclass(frozen=True)
class FastRequant:
    """TFLite's requantization in fewer instructions where the generator proved the accumulator
    bound (int8/common.py ``Requant.fast``; the same integers). ``helpers``: the C of
    ``opfuse_requant_r`` (every ISA: kernels call it) and whatever the writers call;
    ``constants(w, dq, portable)``: a depthwise channel's requantization constants, ``portable(w)``
    the general ones in its ``#else``; ``clamp(w, dq, acc, lo, hi, doubled, portable)``: ``int32_t
    v``, the requantized ``acc`` plus z_y clamped to lo .. hi (None: ``portable`` alone).
    ``onnx``: the C of ONNX's rounding of a float to an int32 (int8/requant.py):
    ``opfuse_quantize_f(v)`` rounds half to even (rintf's mode) and clamps to +-2^30,
    ``opfuse_quantize_fr(v)`` the same where the generator proved |v| < 2^29 (``Requant.ranged``:
    the clamps cannot act); the portable C by default."""

    helpers: str
    constants: Callable[..., None] | None = None
    clamp: Callable[..., None] | None = None
    onnx: str = PORTABLE_ROUND_F


# opfuse_requant_r where no ISA has a faster form: the general helper (int8/requant.py)
PORTABLE_REQUANT_R = """static inline int32_t opfuse_requant_r(int32_t x, int32_t m, int s) {
    return opfuse_requant(x, m, s);
}
"""


@dataclass(frozen=True)
class IsaKernels:
    name: str  # the [isa] name that selects this module
    prelude: str  # model.c text the micro-kernels need: feature detection, intrinsics headers
    dot: DotWriter  # the int8 dot product of a row of activations and a row of weights
    # saturate8(w, value, ranged): C declaring ``int32_t v`` = value clamped to [-128, 127]
    # (``ranged``: a chain follows, which may fold its own clamp to that range away)
    saturate8: Callable[[CWriter, str, bool], None] | None = None
    # conv8(w, node, pre, params, portable) / gemm8(w, node, pre, params, nk, portable): the ISA's
    # whole int8 Conv / Gemm (constant [N][K] weights ``nk``), writing ``portable(w)``'s C in its
    # #else; False when it does not take that node (the caller writes the portable C alone)
    conv8: Callable[..., bool] | None = None
    gemm8: Callable[..., bool] | None = None
    # conv8 takes ``view=``, a graph input's NHWC Transpose its group-1 conv reads in place
    # (fusion/views.py), and its portable C reads it through an NHWC RowSource too
    conv8_nhwc: bool = False
    # helpers(kernel_text): C functions the ISA's kernels call, written once before them ("" when
    # no kernel calls them)
    helpers: Callable[[str], str] | None = None
    # QuantizeLinear's roundf written as the truncating int conversion and the exact fraction
    # (the same integers, clamped to +-2^30 first): gcc vectorizes it, where libm's roundf is a
    # call per element and truncf with its selects stayed scalar (gcc 12)
    roundf_fraction: bool = False
    # (rows, C condition) of the float MatMul core's wider tile (matmul_tile.py) where the
    # condition holds at compile time, the record's matmul_tile elsewhere; None: one tile
    matmul_wide: tuple[int, str] | None = None
    # The int8 matrix family's cores (int8/conv_mcu.py, int8/gemm_mcu.py), which an ISA whose
    # record's int8_dot selects that family (smlad, mve) must give.
    # matrix_core(w, rows=, cols=, stride=, kp=, col=, wrow=): the im2col tile's int32 sums
    # a{j}_{q}, reading weight rows laid out by matrix_weights([N][K] ints) -> [N][Kp] int8
    matrix_core: Callable[..., None] | None = None
    matrix_weights: Callable[[np.ndarray], np.ndarray] | None = None
    # gemm_core(w, rows=, a=, act=, wrow=, k=, init=): sums a{jj} of a row of A against rows of
    # B in their natural [N][K] order (the fully connected core)
    gemm_core: Callable[..., None] | None = None
    # gemm_weights(nk, rows) -> (key tag, layout): B as gemm_core reads it; None: [N][K] as is
    gemm_weights: Callable[[np.ndarray, int], tuple[str, np.ndarray]] | None = None
    # store_tile(w, sums=, bias=, m=, s=, zy=, lo=, hi=, dst=, count=, scalar=, scale=, ranged=):
    # a matrix tile's values of one channel requantized (Requant.fast; ``scale``: ONNX's rounding
    # by that float, ``ranged`` Requant.ranged) and stored contiguously; None: per value
    store_tile: Callable[..., None] | None = None
    # depthwise_row(w, g, first=, end=, store=, doubled=, vec=, scale=, ranged=): the depthwise
    # kernel's interior columns of one output row (dwrow.py) under the ISA's own
    # guard (``scale``: ONNX's rounding, as store_tile's); None: the kernel's DSP pairs
    depthwise_row: Callable[..., None] | None = None
    # elementwise_add(w, n=, x=, y=, out=, zx=, zy=, p=, sub=, zo=, lo=, hi=, scalar=): int8 Add/
    # Sub of two whole tensors (int8/chain.py), the scalar C in its #else; None: that C alone
    elementwise_add: Callable[..., None] | None = None
    # fill_gather(w, src=, xct=, ch=, count=, dst=, stride=, quad=, ch_max=) -> bool: the im2col
    # fill's run of channels of one pixel (int8/im2col.py; ``ch`` a C expression at most
    # ``ch_max``: a shared cascade member's ring); False: the fill's own loop
    fill_gather: Callable[..., bool] | None = None
    # tile_transpose(w, acc, pt, ocv, width, dst, stride, portable, steps=(), scalar=None) ->
    # bool: the float direct conv's register tile ``acc[pt][ocv]`` stored channel-major
    # (``dst[o*stride + p]``) in vectors, the C statement ``portable`` in its #else; ``steps``
    # (``epilogue.Chain.channel_steps``) applied per channel where it can, ``scalar()`` writing
    # the chain on ``acc`` before the other stores; False (nothing written): ``portable`` alone
    tile_transpose: Callable[..., bool] | None = None
    # conv_float(w, node, g, epilogue, params, src, dst, rows, portable) -> bool: a float Conv
    # with constant weights (conv.py's geometry ``g``; ``epilogue`` its fused nodes) from ``src``
    # into ``dst`` (rowsource.py: whole tensors, ``rows`` None, or a cascade member's rings,
    # ``rows`` its first and last C row), ``portable(w)``'s C in its #else; False when the ISA
    # does not take that conv (the caller writes the portable C alone)
    conv_float: Callable[..., bool] | None = None
    # fma_tile(w, acc, rows, lanes, loops, terms, portable) -> bool: a float conv core's register
    # tile ``acc[rows][lanes]`` += scalar * vector for each (row, scalar, vector) term at each step
    # of the nest ``loops(body)`` writes, ``loops(portable)`` in its #else; False: that alone
    fma_tile: Callable[..., bool] | None = None
    # add_rows(w, dst, parts, n) -> bool: ``dst[j] += ((parts[0][j] + parts[1][j]) + ...)`` for
    # j < n (float arrays, in that order, so the same roundings as the portable loop) in vectors,
    # that loop in its #else; False (nothing written): the caller's loop alone
    add_rows: Callable[[CWriter, str, list[str], int], bool] | None = None
    # depthwise_float(w, g, steps, rows, portable) -> bool: a float depthwise conv's rows of one
    # channel in vectors, read in place (dwconv.py; ``steps`` its clamps, ``epilogue.clamps``;
    # ``rows(body)`` loops over them declaring ``r<kh>`` and ``yr``), ``portable()``'s C in its
    # #else; False: that alone. Called only where the [isa] record says ``depthwise_rows``; it
    # takes a conv exactly where ``kernelplan.convf.depthwise_vectors`` does (the cost reads that)
    depthwise_float: Callable[..., bool] | None = None
    # max_pool_row(w, g, pacc, ph, load_row, portable) -> bool: one output row of a float
    # MaxPool (pools.PoolGeom ``g``) into ``pacc[0][...]`` in vectors, ``portable()``'s C in its
    # #else; False: that alone
    max_pool_row: Callable[..., bool] | None = None
    # matrix_tail: ``matrix_core`` adds to sums declared by its caller (``declare=False``), so a
    # cascade row ends in a narrower tile of its own width (int8/mcu_tiles.row_tiles)
    matrix_tail: bool = False
    # narrow: the matrix family over an int8 scratch for int8 inputs (None: the int16 one only)
    narrow: NarrowMatrix | None = None
    # member_functions: the dtypes ("int8", "float") whose cascade members on a ring are each a
    # function of its own (int8/cascade.py: every int8 depthwise / matrix-core pointwise member;
    # cascade.py: every float depthwise member), not only those of a shape another member has:
    # the ISA's cores keep their vectors and taps in registers a band loop's switch of several
    # members does not leave them (mve: both; armv7em: int8 only, where the switch kept a
    # depthwise member's pointers and setup in stack slots, vww_96_int8 on cortex-m7 12,929,592
    # -> 12,890,695 instructions; empty: inline, as before)
    member_functions: frozenset[str] = frozenset()
    # depthwise_row_guard: the preprocessor line that opens ``depthwise_row``'s branch
    depthwise_row_guard: str = ""
    # depthwise_pairs: the int8 depthwise family's interior groups on SIMD pairs (None: the
    # portable sums alone)
    depthwise_pairs: DepthwisePairs | None = None
    # fast_requant: TFLite's requantization where the accumulator bound allows a faster form
    fast_requant: FastRequant = FastRequant(PORTABLE_REQUANT_R)
