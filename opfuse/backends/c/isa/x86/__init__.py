"""The x86-64 ISA module (docs/isa.md): micro-kernels for AVX2 and AVX-512, each under the
compiler's own feature macros, so a project built with ``-march=x86-64-v2`` runs the portable C,
``-march=x86-64-v3`` the AVX2 kernels and ``-march=native`` on an AVX-512 part the widest.

The int8 micro-kernels (docs/architecture.md, "int8 C on x86 hosts"): ``core.py`` the Conv/Gemm
core (vpdpbusd on zmm or ymm, exact vpmaddwd on AVX2) and its input staging, ``conv.py`` the
kernels that take a Conv or Gemm (``IsaKernels.conv8``/``gemm8``), ``gemv.py`` a Gemm of one
row (a batch-1 fully connected layer), ``depthwise.py`` and
``depthwise_avx2.py`` the depthwise core, ``residual.py`` the vector residual Add
(``residual_ymm.py`` its ymm block, ``vec.py`` the two widths' spellings), ``helpers.py``
the intrinsics helpers and vector requantization written once into model.c; ``transpose.py``
the float direct conv's channel-major tile store (``IsaKernels.tile_transpose``), ``fma_tile.py``
the float conv cores' register tile in zmm/ymm FMAs (``IsaKernels.fma_tile``), ``floatdw.py``
a float depthwise conv's rows in zmm registers (``IsaKernels.depthwise_float``).

``matmul_wide``: the float MatMul core (matmul_tile.py) takes 8 rows per tile where AVX-512 gives
32 vector registers of 16 floats (one per row of sums), the record's 4 elsewhere: in a standalone
196x192x768 product on a Zen 4 host 8 x 16 ran 199-203 GFLOP/s with -march=native and 4 x 16
137-142; with -march=x86-64-v3 4 x 16 ran 121 and 8 x 16 71 (spills), hence both tiles.
"""

from __future__ import annotations

from opfuse.backends.c.isa import portable
from opfuse.backends.c.isa.base import IsaKernels
from opfuse.backends.c.isa.x86.conv import emit_conv_x86, emit_gemm_x86
from opfuse.backends.c.isa.x86.floatdw import depthwise_float
from opfuse.backends.c.isa.x86.fma_tile import add_rows, fma_tile
from opfuse.backends.c.isa.x86.helpers import prelude as helpers
from opfuse.backends.c.isa.x86.pool import max_pool_row
from opfuse.backends.c.isa.x86.transpose import tile_transpose

KERNELS = IsaKernels(name="x86", prelude="", dot=portable.dot, saturate8=portable.saturate8,
                     conv8=emit_conv_x86, gemm8=emit_gemm_x86, conv8_nhwc=True, helpers=helpers,
                     roundf_fraction=True, matmul_wide=(8, "defined(__AVX512F__)"),
                     tile_transpose=tile_transpose, fma_tile=fma_tile, add_rows=add_rows,
                     max_pool_row=max_pool_row, depthwise_float=depthwise_float)
