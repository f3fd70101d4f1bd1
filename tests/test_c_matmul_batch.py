"""A MatMul over a shared 2-D B with batched A runs as one GEMM of M = product of A's leading
dims (opfuse/backends/c/matmul.py, ``_merged_rows``; docs/architecture.md, "The float MatMul/Gemm
core"): generated C against onnxruntime with the epilogues a Linear carries (bias, GELU,
residual, LayerNorm after), and the cases that must keep the per-batch loop."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from opfuse.backends.c import emit_c
from opfuse.backends.c.matmul_tile import pack_panels
from opfuse.measure.validate.c_float import validate_c
from opfuse.pipeline import compile_model
from opfuse.targets import load_target
from tests.helpers.parsed import normal, parsed_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

MERGED = {
    # ConvNeXt's channels-last Linear: [1, 6, 7, 40] rows (42: not a multiple of MR), 45 columns
    # (a last panel of 13), bias then erf-GELU as torch exports it
    "channels_last_gelu": parsed_model("""g (float[1,6,7,40] x) => (float[1,6,7,45] y) {
        m = MatMul(x, w)
        a = Add(m, b)
        d = Div(a, sq2)
        e = Erf(d)
        p = Add(e, one)
        q = Mul(a, p)
        y = Mul(q, half)
    }""", w=normal(40, 45), b=normal(45, seed=1), sq2=np.array(2**0.5, np.float32),
        one=np.array(1.0, np.float32), half=np.array(0.5, np.float32)),
    # two real batch dims and a residual of the output's shape
    "batched_residual": parsed_model("""g (float[2,3,5,24] x, float[2,3,5,20] r) => (float[2,3,5,20] y) {
        m = MatMul(x, w)
        a = Add(m, b)
        y = Add(a, r)
    }""", w=normal(24, 20), b=normal(20, seed=1)),
    # B broadcast over the batch from [1, k, n]; rows feed a LayerNorm (stored sum: two outputs)
    "broadcast_b_norm": parsed_model(
        """g (float[3,9,30] x, float[3,9,17] r) => (float[3,9,17] y, float[3,9,17] s) {
        m = MatMul(x, w)
        a = Add(m, b)
        s = Add(a, r)
        y = LayerNormalization<axis=-1, epsilon=1e-5>(s, g, bb)
    }""", w=normal(1, 30, 17), b=normal(17, seed=1), g=normal(17, seed=2), bb=normal(17, seed=3)),
    # post-norm with the sum read by nothing else: rows wait in the kernel's row buffer
    "batched_row_buffer_norm": parsed_model("""g (float[4,33,50] x) => (float[4,33,40] y) {
        m = MatMul(x, w)
        a = Add(m, b)
        y = LayerNormalization<axis=-1, epsilon=1e-5>(a, g, bb)
    }""", w=normal(50, 40), b=normal(40, seed=1), g=normal(40, seed=2), bb=normal(40, seed=3)),
}

# a Gemm of a runtime transposed B: the core, through a stack panel (PANEL_FLOATS)
RUNTIME_TRANSB = parsed_model("""g (float[10,7] a, float[21,7] b) => (float[10,21] y) {
    y = Gemm<transB=1, alpha=0.5>(a, b, c)
}""", c=normal(21, seed=3))

KEPT = {
    # an epilogue operand that differs per batch but not per row: not indexable on merged rows
    "per_batch_operand": parsed_model("""g (float[2,3,5,24] x, float[2,1,1,20] r) => (float[2,3,5,20] y) {
        m = MatMul(x, w)
        y = Add(m, r)
    }""", w=normal(24, 20)),
    # B differs per batch coordinate: one GEMM per coordinate
    "batched_b": parsed_model("""g (float[3,5,24] x) => (float[3,5,20] y) {
        y = MatMul(x, w)
    }""", w=normal(3, 24, 20)),
}


def _c(case: onnx.ModelProto, tmp_path: Path, target: str = "x86-host") -> str:
    path = tmp_path / "m.onnx"
    onnx.save(case, path)
    emit_c(compile_model(path, target), tmp_path / "c", cascades=False)
    return (tmp_path / "c" / "model.c").read_text()


def _validate(case: onnx.ModelProto, tmp_path: Path, target: str) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(case, path)
    report = validate_c(compile_model(path, target), outdir=tmp_path / "v", cascades=False)
    assert report.ok, report
    for out in report.outputs:
        assert out.max_abs_err <= 1e-5 * max(out.max_ref, 1.0), out


@pytest.mark.parametrize("target", ["x86-host", "cortex-m7"])
@pytest.mark.parametrize("case", [*MERGED, *KEPT, "gemm_runtime_transb"])
def test_batched_matmul_matches_onnxruntime(case: str, target: str, tmp_path: Path) -> None:
    _validate({**MERGED, **KEPT, "gemm_runtime_transb": RUNTIME_TRANSB}[case], tmp_path, target)


@pytest.mark.parametrize("case", list(MERGED))
def test_shared_b_runs_as_one_gemm(case: str, tmp_path: Path) -> None:
    """No loop over batch coordinates: the core's row blocks span every batch row."""
    text = _c(MERGED[case], tmp_path)
    assert "for (int b0 = 0;" not in text
    assert "float c3[16];" in text and "float acc[" not in text


def test_gemm_runtime_transb_runs_the_core(tmp_path: Path) -> None:
    text = _c(RUNTIME_TRANSB, tmp_path)
    assert "float bt[" in text and "float c3[16];" in text and "float acc[" not in text


@pytest.mark.parametrize("case", list(KEPT))
def test_unmergeable_keeps_the_batch_loop(case: str, tmp_path: Path) -> None:
    assert "for (int b0 = 0;" in _c(KEPT[case], tmp_path)


@pytest.mark.parametrize("n", [17, 24, 40])
def test_padded_panels_hold_b_then_zeros(n: int) -> None:
    """``pack_panels(pad=True)``: every panel NR wide, the last one's extra columns zero."""
    nr, k = load_target("x86-host").isa.matmul_tile[1], 5
    kn = normal(k, n)
    packed = pack_panels(kn, nr, pad=True).reshape(-1, k, nr)
    assert packed.shape[0] == -(-n // nr)
    wide = np.concatenate([kn, np.zeros((k, packed.shape[0] * nr - n), np.float32)], axis=1)
    for p in range(packed.shape[0]):
        np.testing.assert_array_equal(packed[p], wide[:, p * nr:(p + 1) * nr])


def test_last_panel_runs_the_full_width(tmp_path: Path) -> None:
    """On the host a last panel of 8 columns (n = 40) accumulates NR wide on zero-padded weights
    (a tail of 8 sums ran 3x slower than a full panel) and stores only its 8 columns."""
    case = parsed_model(
        """g (float[1,9,30] x) => (float[1,9,40] y) { y = MatMul(x, w) }""", w=normal(30, 40))
    text = _c(case, tmp_path)
    assert "float c0[8];" not in text and "float c0[16];" in text
    assert "i < 8; ++i" in text  # the tail's store
    _validate(case, tmp_path, "x86-host")
