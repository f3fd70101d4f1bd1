"""A float depthwise conv's three cores side by side on this host, one process, in one run: the
band core (``dwconv.py``: rows copied into a zero-bordered stack buffer, one flat loop), the row
nest read in place (``dwrow.py`` over ``arith.FLOAT32``, what a scalar FPU and a vector unit's
narrow rows run) and a sketch of what the row nest could hand an x86 ISA hook: the whole output
row in masked AVX-512 vectors, read in place (``_mm512_maskz_loadu_ps`` for the lanes inside the
row, a stride of 2 as two loads and one ``vpermt2ps``), the clamps in vectors, a masked store.

    python benchmarks/dw_row_vectors.py [--runs N] [C,H,W,STRIDE ...]

Each core is built by gcc (-O3 -ffp-contract=fast -march=native) as the cascade member's form
over the whole tensor (rows 0 .. OH-1, Relu6 epilogue, 3x3, padding 1), timed alternating (best
of ``--runs`` rounds), and the sketch's outputs compared with the band's. Defaults: the depthwise
geometries of mobilenet_v2_128_0.5 at 128x128 (channels, input side, stride). The sketch is
measurement only (AVX-512F hosts); nothing in opfuse emits it.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.dwconv import emit_depthwise_rows
from opfuse.backends.c.flags import BASE
from opfuse.backends.c.rowsource import RowSink, RowSource
from opfuse.kernelplan.conv8 import ConvGeom

RELU6 = ("v = v < 0.0f ? 0.0f : v;", "v = v > 6.0f ? 6.0f : v;")
DEFAULTS = ("8,64,64,1", "48,64,64,2", "80,32,32,1", "96,32,32,2", "64,16,16,1", "96,16,16,2",
            "152,8,8,1", "272,8,8,2", "272,4,4,1")


def _geom(c: int, h: int, w: int, s: int) -> ConvGeom:
    oh, ow = (h + 2 - 3) // s + 1, (w + 2 - 3) // s + 1
    return ConvGeom(1, c, h, w, c, oh, ow, c, (3, 3), (s, s), (1, 1), (1, 1))


def _portable(name: str, g: ConvGeom, zero: str | None) -> str:
    w = CWriter(1)
    w("const int a = 0, b = " + str(g.oh - 1) + ";")
    sink = RowSink(RowSource.of("y", g.c, g.oh, g.ow), RELU6)
    emit_depthwise_rows(w, g, RowSource.of("x", g.c, g.ih, g.iw), "wt", "bias", sink, g.oh, zero)
    return (f"KERNEL void {name}(const float *restrict x, const float *restrict wt, const float *restrict"
            f" bias, const float *restrict zero, float *restrict y) {{\n    (void)zero;\n"
            f"{w.text()}}}\n")


def _vectors(g: ConvGeom) -> str:
    """The masked AVX-512 sketch: every output row in vectors of 16 columns, written out."""
    s, lines = g.s[1], []
    add = lines.append
    add("KERNEL void vec(const float *restrict x, const float *restrict wt, const float *restrict bias,"
        " const float *restrict zero, float *restrict y) {")
    add("  const __m512 lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(6.0f);")
    add("  const __m512i ev = _mm512_set_epi32(30,28,26,24,22,20,18,16,14,12,10,8,6,4,2,0);")
    add("  (void)ev;")
    add(f"  for (int c = 0; c < {g.c}; ++c) {{")
    add(f"    const float *xc = x + c*{g.ih * g.iw};")
    for t in range(9):
        add(f"    const __m512 w{t} = _mm512_set1_ps(wt[c*9 + {t}]);")
    add("    const __m512 bv = _mm512_set1_ps(bias[c]);")
    add(f"    for (int oh = 0; oh < {g.oh}; ++oh) {{")
    add(f"      float *yr = y + c*{g.oh * g.ow} + oh*{g.ow};")
    add(f"      const int ih0 = oh*{s} - 1;")
    for kh in range(3):
        add(f"      const float *r{kh} = (unsigned)(ih0 + {kh}) < {g.ih}u ? "
            f"xc + (ih0 + {kh})*{g.iw} : zero;")
    for i0 in range(0, g.ow, 16):
        n = min(16, g.ow - i0)
        add("      { __m512 v = bv;")
        for kw in range(3):
            x0 = i0 * s - 1 + kw
            for kh in range(3):
                if s == 1:
                    m = sum(1 << j for j in range(n) if 0 <= x0 + j < g.iw)
                    tap = f"_mm512_maskz_loadu_ps(0x{m:x}, r{kh} + {x0})"
                else:  # lanes read x0 + 2j: the even lanes of two loads
                    ma = sum(1 << j for j in range(0, 16, 2) if 0 <= x0 + j < g.iw and j // 2 < n)
                    mb = sum(1 << j for j in range(0, 16, 2)
                             if 0 <= x0 + 16 + j < g.iw and 8 + j // 2 < n)
                    tap = (f"_mm512_permutex2var_ps(_mm512_maskz_loadu_ps(0x{ma:x}, r{kh} + {x0}),"
                           f" ev, _mm512_maskz_loadu_ps(0x{mb:x}, r{kh} + {x0 + 16}))")
                add(f"        v = _mm512_fmadd_ps(w{kh * 3 + kw}, {tap}, v);")
        add("        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), v, lo);")
        add("        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), v, hi);")
        add(f"        _mm512_mask_storeu_ps(yr + {i0}, 0x{(1 << n) - 1:x}, v); }}")
    add("    }")
    add("  }")
    add("}")
    return "\n".join(lines) + "\n"


def _run(spec: str, runs: int) -> str:
    c, h, w, s = (int(v) for v in spec.split(","))
    g = _geom(c, h, w, s)
    loops = "".join(
        f"void rep_{k}(int n, const float *x, const float *wt, const float *bias, "
        f"const float *zero, float *y) {{ for (int i = 0; i < n; ++i) {k}(x, wt, bias, zero, y); }}\n"
        for k in ("band", "row", "vec"))
    src = ("#include <immintrin.h>\n#define OPFUSE_ALIGNED __attribute__((aligned(64)))\n"
           "#define KERNEL __attribute__((noinline))\n"
           + _portable("band", g, None) + _portable("row", g, "zero") + _vectors(g) + loops)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "dw.c").write_text(src)
        subprocess.run(["gcc", *BASE, "-march=native", "-shared", "-fPIC", "dw.c", "-o", "dw.so"],
                       cwd=tmp, check=True)
        lib = ctypes.CDLL(str(Path(tmp) / "dw.so"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 9)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    zero = np.zeros(w, np.float32)
    outs = {k: np.zeros((c, g.oh, g.ow), np.float32) for k in ("band", "row", "vec")}
    ptrs = [a.ctypes.data_as(ctypes.c_void_p) for a in (x, wt, bias, zero)]
    best = dict.fromkeys(outs, float("inf"))
    reps = max(1, int(2e7 // (c * g.oh * g.ow * 9)))
    for _ in range(runs):
        for name, y in outs.items():
            fn = getattr(lib, f"rep_{name}")
            t0 = time.perf_counter()
            fn(reps, *ptrs, y.ctypes.data_as(ctypes.c_void_p))
            best[name] = min(best[name], (time.perf_counter() - t0) / reps * 1e6)
    diff = float(np.abs(outs["vec"] - outs["band"]).max())
    return (f"{spec:<14} {best['band']:>8.2f} {best['row']:>8.2f} {best['vec']:>8.2f} "
            f"{best['row'] / best['band']:>9.2f}x {best['vec'] / best['band']:>9.2f}x {diff:>9.2g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="alternating rounds (best of)")
    ap.add_argument("geometries", nargs="*", default=list(DEFAULTS),
                    help="C,H,W,STRIDE of a 3x3 depthwise conv padded by 1")
    args = ap.parse_args()
    print(f"{'C,H,W,stride':<14} {'band us':>8} {'row us':>8} {'vec us':>8} {'row/band':>10} "
          f"{'vec/band':>10} {'max|diff|':>9}")
    for spec in args.geometries:
        print(_run(spec, args.runs), flush=True)


if __name__ == "__main__":
    main()
