"""The register-blocked MatMul/Gemm core (opfuse/backends/c/matmul_tile.py): panel packing (with
numpy at generation time, and attention's in C at run time, which must agree), and generated C
against onnxruntime on shapes that reach every edge the core specialises at generation time (a
last tile of fewer than MR rows, a last panel of fewer than NR columns, several blocks of rows,
fewer rows or columns than one tile), on the host's tile and a board's."""

from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from opfuse.backends.c import emit_c
from opfuse.backends.c.attention import pack_head
from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.flags import BASE, WARN
from opfuse.backends.c.isa import x86
from opfuse.backends.c.matmul_tile import pack_panels
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.c_float import reference, validate_c
from opfuse.pipeline import compile_model
from opfuse.targets import load_target
from tests.helpers.parsed import normal, parsed_model

# the tiles of the ISA records (opfuse/targets/isa.py) and x86's wider one (isa/x86.py)
HOST_TILE = load_target("x86-host").isa.matmul_tile
BOARD_TILE = load_target("cortex-m7").isa.matmul_tile
WIDE_MR, WIDE_IF = x86.KERNELS.matmul_wide[0], f"#if {x86.KERNELS.matmul_wide[1]}"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

CASES = {
    # a Linear with bias and Relu: 13 rows (3 tiles of 4 + 1), 45 columns (2 panels of 16 + 13)
    "linear_edges": parsed_model("""g (float[1,13,37] x) => (float[1,13,45] y) {
        m = MatMul(x, w)
        a = Add(m, b)
        y = Relu(a)
    }""", w=normal(37, 45), b=normal(45, seed=1)),
    # fewer rows and columns than one tile
    "smaller_than_a_tile": parsed_model("""g (float[3,5] x) => (float[3,7] y) {
        y = MatMul(x, w)
    }""", w=normal(5, 7)),
    # 700 x 200 rows of A: more than one block of rows (BLOCK_A_FLOATS), and a last short block
    "row_blocks": parsed_model("""g (float[700,200] x) => (float[700,20] y) {
        y = MatMul(x, w)
    }""", w=normal(200, 20)),
    # transposed constant operands, alpha folded into the packed B, beta * C of one row
    "gemm_transposed": parsed_model("""g (float[9,6] a) => (float[6,19] y) {
        y = Gemm<transA=1, transB=1, alpha=0.5, beta=2.0>(a, b, c)
    }""", b=normal(19, 9), c=normal(1, 19, seed=2)),
    # a runtime B read in place, alpha at run time, C broadcast along the columns
    "gemm_runtime_b": parsed_model("""g (float[10,7] a, float[7,21] b) => (float[10,21] y) {
        y = Gemm<alpha=0.5>(a, b, c)
    }""", c=normal(10, 1, seed=3)),
    # broadcast batch dims, both operands at run time
    "batched_runtime": parsed_model("""g (float[2,3,10,7] x, float[3,7,18] z) => (float[2,3,10,18] y) {
        y = MatMul(x, z)
    }"""),
    # attention-style scores through a Transpose: B's columns are strided (packed per panel)
    "transposed_view": parsed_model("""g (float[2,11,8] q, float[2,19,8] k) => (float[2,11,19] y) {
        t = Transpose<perm=[0,2,1]>(k)
        y = MatMul(q, t)
    }"""),
    # post-norm block: Linear + bias + residual + LayerNorm, the sum read by nothing else
    # (rows kept in the kernel's row buffer), 130 rows of 600: several blocks of rows on the host
    # (BLOCK_A_FLOATS) and the board (BOARD_ROW_FLOATS)
    "linear_residual_norm": parsed_model("""g (float[1,130,600] x, float[1,130,40] r) => (float[1,130,40] y) {
        m = MatMul(x, w)
        a = Add(m, b)
        s = Add(a, r)
        y = LayerNormalization<axis=-1, epsilon=1e-5>(s, g, bb)
    }""", w=normal(600, 40), b=normal(40, seed=1), g=normal(40, seed=2), bb=normal(40, seed=3)),
    # the same with the sum also an output: rows are stored, then normalised from the output
    "linear_residual_norm_stored": parsed_model(
        """g (float[1,130,600] x, float[1,130,40] r) => (float[1,130,40] y, float[1,130,40] s) {
        m = MatMul(x, w)
        a = Add(m, b)
        s = Add(a, r)
        y = LayerNormalization<axis=-1, epsilon=1e-5>(s, g, bb)
    }""", w=normal(600, 40), b=normal(40, seed=1), g=normal(40, seed=2), bb=normal(40, seed=3)),
}


@pytest.mark.parametrize("nr", [HOST_TILE[1], BOARD_TILE[1], 5])
def test_panels_are_read_in_the_cores_order(nr: int) -> None:
    """Element (kk, j) of B is where the core reads it: panel j // NR (k*NR floats each) at
    kk*NR + j % NR, the last n % NR columns as one [k][n % NR] panel."""
    k, n = 7, 2 * nr + 3
    kn = normal(k, n)
    packed = pack_panels(kn, nr)
    assert packed.size == kn.size
    full = n // nr * nr
    for kk in range(k):
        for j in range(n):
            if j < full:
                at = (j // nr) * k * nr + kk * nr + j % nr
            else:
                at = full * k + kk * (n - full) + (j - full)
            assert packed[at] == kn[kk, j], (kk, j)


@pytest.mark.parametrize("target", ["x86-host", "cortex-m7"])
@pytest.mark.parametrize("case", list(CASES))
def test_core_matches_onnxruntime(case: str, target: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.onnx"
    onnx.save(CASES[case], path)
    report = validate_c(compile_model(path, target), outdir=tmp_path / "c", cascades=False)
    assert report.ok, report
    for out in report.outputs:
        assert out.max_abs_err <= 1e-5 * max(out.max_ref, 1.0), out


@pytest.mark.parametrize("case", ["linear_edges", "transposed_view", "linear_residual_norm"])
def test_core_is_what_runs(case: str, tmp_path: Path) -> None:
    """The cases above exercise the tiled core (MR named accumulators per tile), the packed
    weights and, for a transposed view, the stack panel; not the row kernel."""
    path = tmp_path / f"{case}.onnx"
    onnx.save(CASES[case], path)
    emit_c(compile_model(path, "x86-host"), tmp_path / "c", cascades=False)
    text = (tmp_path / "c" / "model.c").read_text()
    mr, nr = HOST_TILE
    assert f"float c{mr - 1}[{nr}];" in text
    assert "float acc[" not in text
    if case == "transposed_view":
        assert "float bt[" in text


# -mno-avx512f: the preprocessor's other branch, HOST_TILE's MR rows (an AVX2 or SSE build)
@pytest.mark.parametrize("flags", [("-march=native",), ("-march=native", "-mno-avx512f")])
@pytest.mark.parametrize("case", ["linear_edges", "row_blocks", "transposed_view",
                                  "linear_residual_norm"])
def test_both_host_tiles_match_onnxruntime(case: str, flags: tuple[str, ...],
                                           tmp_path: Path) -> None:
    """The host core is emitted twice, WIDE_MR rows per tile under ``WIDE_IF`` and HOST_TILE's MR
    otherwise: each build, with and without AVX-512, matches onnxruntime."""
    path = tmp_path / f"{case}.onnx"
    onnx.save(CASES[case], path)
    out = tmp_path / "c"
    emit_c(compile_model(path, "x86-host"), out, cascades=False)
    text = (out / "model.c").read_text()
    assert WIDE_IF in text and f"float c{WIDE_MR - 1}[{HOST_TILE[1]}];" in text
    feeds, expected, _ = reference(path)
    got = CModel(build_shared(out, extra=flags)).run(feeds)
    for name, ref in expected.items():
        err = float(abs(got[name] - ref).max())
        assert err <= 1e-5 * max(float(abs(ref).max()), 1.0), (name, err)


# a batch-1 dense layer: one row, so each tile keeps 8 (wide) or 4 partial sums, added up by
# x86's add_rows in zmm or ymm; 45 columns: panels of 16 (vectors) and a last one of 13 (its loop)
GEMV = parsed_model("""g (float[1,300] x) => (float[1,45] y) {
    m = MatMul(x, w)
    a = Add(m, b)
    y = Relu(a)
}""", w=normal(300, 45), b=normal(45, seed=1))


@pytest.mark.parametrize("flags", [("-march=native",), ("-march=native", "-mno-avx512f"),
                                   ("-march=x86-64-v2",)])
def test_gemv_partial_sums_added_in_vectors_round_alike(flags: tuple[str, ...],
                                                         tmp_path: Path) -> None:
    """The partial sums added in vectors (``IsaKernels.add_rows``) round as the portable loop in
    its #else does: the build equals its ``-DOPFUSE_NO_X86_SIMD`` twin bit for bit, and
    onnxruntime within float tolerance."""
    path = tmp_path / "gemv.onnx"
    onnx.save(GEMV, path)
    out = tmp_path / "c"
    emit_c(compile_model(path, "x86-host"), out, cascades=False)
    text = (out / "model.c").read_text()
    assert "_mm512_add_ps(s, _mm512_loadu_ps(c0_7 + j))" in text, "no zmm sum of 8 partials"
    assert "_mm256_add_ps(s, _mm256_loadu_ps(c0_3 + j))" in text, "no ymm sum of 4 partials"
    feeds, expected, _ = reference(path)
    got = CModel(build_shared(out, extra=flags, name="v.so")).run(feeds)
    plain = CModel(build_shared(out, extra=(*flags, "-DOPFUSE_NO_X86_SIMD"), name="p.so")).run(feeds)
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], plain[name], err_msg=f"{flags}")
        err = float(abs(got[name] - ref).max())
        assert err <= 1e-5 * max(float(abs(ref).max()), 1.0), (name, err)


@pytest.mark.parametrize("case", ["transposed_view", "linear_residual_norm", "linear_edges"])
def test_stack_scratch_counts_the_tiles(case: str, tmp_path: Path) -> None:
    """The tile's row arrays, the stack panel and the row buffer are all in
    OPFUSE_STACK_SCRATCH_BYTES (counted from the declarations, one array per line)."""
    path = tmp_path / f"{case}.onnx"
    onnx.save(CASES[case], path)
    emitted = emit_c(compile_model(path, "x86-host"), tmp_path / "c", cascades=False)
    source = (tmp_path / "c" / "model.c").read_text()
    per_kernel = []
    for body in source.split("\nstatic void k")[1:]:
        total = 0
        for line in body.splitlines():  # every array of a declaration, however many per line
            if line.strip().startswith("float ") and "*" not in line:  # not a pointer table
                decl = re.sub(r"=[^,;]*", "", line)  # initializers may hold commas in braces
                decl = re.sub(r"\{[^}]*\}", "", decl)
                for dims in re.findall(r"\w+((?:\[\d+\])+)", decl):
                    total += 4 * math.prod(int(n) for n in re.findall(r"\d+", dims))
        per_kernel.append(total)
    assert emitted.stack_scratch_bytes == max(per_kernel) > 0


def _run_pack_head(tmp: Path, kb: np.ndarray, strides: tuple[int, int], d: int, n: int,
                   nr: int) -> np.ndarray:
    """The C that attention.pack_head generates, built on the host and run on ``kb``."""
    w = CWriter(1)
    pack_head(w, "kp", *strides, d, n, nr)
    (tmp / "pack.c").write_text(
        f"void pack(const float *kb, float *kp);\nvoid pack(const float *kb, float *kp) {{\n"
        f"{w.text()}}}\n")
    subprocess.run(["gcc", *BASE, *WARN, "-shared", "-fPIC", "pack.c", "-o", "pack.so"],
                   cwd=tmp, check=True)
    lib = ctypes.CDLL(str(tmp / "pack.so"))
    kp = np.full(d * n, np.nan, np.float32)  # a slot the C leaves unwritten stays NaN
    lib.pack(kb.ctypes.data_as(ctypes.c_void_p), kp.ctypes.data_as(ctypes.c_void_p))
    return kp


@pytest.mark.parametrize("stored", ["keys_by_row", "kt_by_row"])
@pytest.mark.parametrize("n, nr", [(2 * HOST_TILE[1] + 5, HOST_TILE[1]), (12, BOARD_TILE[1]),
                                   (3, HOST_TILE[1])])
def test_runtime_packing_writes_the_generation_time_layout(stored: str, n: int, nr: int,
                                                           tmp_path: Path) -> None:
    """attention's K^T packing, generated C run on the host, writes byte for byte what
    pack_panels writes with numpy: the core reads both as one layout."""
    d = 7
    keys = normal(n, d)  # K as (N, D): Kt[dd, j] = K[j, dd]
    kt = np.ascontiguousarray(keys.T)
    kb, strides = (keys, (1, d)) if stored == "keys_by_row" else (kt, (n, 1))
    got = _run_pack_head(tmp_path, np.ascontiguousarray(kb, np.float32), strides, d, n, nr)
    assert got.tobytes() == pack_panels(kt, nr).tobytes()
