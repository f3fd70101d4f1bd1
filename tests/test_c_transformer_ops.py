"""Float C kernels for the ops transformer exports keep after folding (issue 21): Gather,
Softmax on any axis, batched MatMul, Erf/Gelu, Where/Expand/Range and the masks, Instance- and
GroupNormalization. Each graph is written as ONNX text and the generated C is compared with
onnxruntime through ``validate_c``, fused and unfused."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from opfuse.backends.c import emit_c
from opfuse.errors import OpfuseError
from opfuse.measure.run.host import (
    CModel,
    build_executable,
    build_shared,
    manifest,
    run_executable,
)
from opfuse.measure.validate.c_float import validate_c
from opfuse.pipeline import compile_model
from tests.helpers.sanitize import SAN, sanitized_run_matches

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _weights(text: str, **arrays: np.ndarray) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for name, arr in arrays.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    return model


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


OPSET = '<ir_version: 8, opset_import: ["" : 17]>'
CASES = {
    # embedding lookup: run-time token ids (batch 2 x 5) into a 16 x 8 table, then a scale
    "embedding": (_weights(f"""{OPSET} g (int64[2,5] ids) => (float[2,5,8] y) {{
        e = Gather(table, ids)
        y = Mul(e, e)
    }}""", table=_rand(16, 8)), {"ids": np.array([[0, 3, -1, 15, 7], [-16, 2, 2, 9, 1]])}),
    # index select on a middle axis with negative constant indices, and the class token [:, 0]
    "index_select": (_weights(f"""{OPSET} g (float[2,6,4] x) => (float[2,3,4] y, float[2,4] c) {{
        y = Gather<axis=1>(x, picks)
        c = Gather<axis=1>(x, zero)
    }}""", picks=np.array([-1, 0, 4]), zero=np.array(0)), None),
    "gather_last_axis": (_weights(f"""{OPSET} g (float[3,5] x) => (float[3,2,2] y) {{
        y = Gather<axis=-1>(x, picks)
    }}""", picks=np.array([[4, -5], [2, 2]])), None),
    "softmax_axes": (onnx.parser.parse_model(f"""{OPSET} g (float[2,3,5] x)
        => (float[2,3,5] a, float[2,3,5] b, float[2,3,5] c) {{
        a = Softmax<axis=0>(x)
        b = Softmax<axis=1>(x)
        c = Softmax<axis=-1>(x)
    }}"""), None),
    "softmax_opset11_coerced": (onnx.parser.parse_model("""<ir_version: 7,
        opset_import: ["" : 11]> g (float[2,3,5] x) => (float[2,3,5] y) {
        y = Softmax<axis=1>(x)
    }"""), None),
    "batched_matmul_broadcast": (onnx.parser.parse_model(f"""{OPSET} g (float[2,1,3,4] a,
        float[3,4,5] b, float[5,4] c) => (float[2,3,3,5] y, float[2,3,3,4] z) {{
        y = MatMul(a, b)
        z = MatMul(y, c)
    }}"""), None),
    "gelu_erf_and_tanh": (onnx.parser.parse_model("""<ir_version: 9, opset_import: ["" : 20]>
        g (float[3,7] x) => (float[3,7] a, float[3,7] b, float[3,7] c) {
        a = Gelu(x)
        b = Gelu<approximate="tanh">(x)
        c = Erf(x)
    }"""), None),
    # an attention mask as BERT exports it: ids != 0, inverted, selected into large negatives
    "mask_where": (_weights(f"""{OPSET} g (float[2,1,4] mask, float[2,3,4] s) => (float[2,3,4] y,
        bool[2,3,4] m) {{
        zero = Constant<value = float {{0.0}}>()
        keep = Greater(mask, zero)
        drop = Not(keep)
        same = Equal(s, s)
        m = Or(drop, same)
        y = Where(drop, neg, s)
    }}""", neg=np.array([-1e4], np.float32)), None),
    # a Range whose start arrives at run time (declared length 4), compared, cast and broadcast
    "range_expand_cast": (onnx.parser.parse_model(f"""{OPSET} g (float[1,4] x, int64 start)
        => (float[3,4] y, int64[4] r) {{
        limit = Constant<value = int64 {{9}}>()
        delta = Constant<value = int64 {{2}}>()
        r = Range(start, limit, delta)
        shape = Constant<value = int64[2] {{3, 4}}>()
        e = Expand(x, shape)
        five = Constant<value = int64 {{5}}>()
        less = Less(r, five)
        f = Cast<to = 1>(less)
        y = Add(e, f)
    }}"""), {"x": _rand(1, 4), "start": np.array(1)}),
    "instance_norm": (_weights(f"""{OPSET} g (float[2,4,5,3] x) => (float[2,4,5,3] y) {{
        y = InstanceNormalization<epsilon = 0.001>(x, sc, bi)
    }}""", sc=_rand(4, seed=1), bi=_rand(4, seed=2)), None),
    # torch's GroupNorm(2 groups, 6 channels): Reshape, InstanceNorm, Reshape, Mul, Add
    "groupnorm_torch_export": (_weights(f"""{OPSET} g (float[1,6,4,4] x) => (float[1,6,4,4] y) {{
        r = Reshape(x, grouped)
        n = InstanceNormalization<epsilon = 1e-5>(r, ones, zeros)
        b = Reshape(n, back)
        m = Mul(b, gamma)
        y = Add(m, beta)
    }}""", grouped=np.array([1, 2, -1]), back=np.array([1, 6, 4, 4]),
        ones=np.ones(2, np.float32), zeros=np.zeros(2, np.float32),
        gamma=_rand(6, 1, 1, seed=3), beta=_rand(6, 1, 1, seed=4)), None),
    "groupnorm_native": (_weights("""<ir_version: 10, opset_import: ["" : 21]>
        g (float[2,6,3,5] x) => (float[2,6,3,5] y) {
        y = GroupNormalization<num_groups = 3, epsilon = 1e-5>(x, sc, bi)
    }""", sc=_rand(6, seed=5), bi=_rand(6, seed=6)), None),
}


def _check(report) -> None:
    assert report.ok, report
    for out in report.outputs:
        assert out.max_abs_err <= 1e-4 * out.max_ref + 1e-6, out


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    model, inputs = CASES[case]
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    for fuse in (True, False):
        _check(validate_c(path, fuse=fuse, inputs=inputs, outdir=tmp_path / f"c{fuse}"))


def _embedding(tmp_path: Path) -> tuple[CModel, np.ndarray]:
    model, _ = CASES["embedding"]
    path = tmp_path / "emb.onnx"
    onnx.save(model, path)
    folder = tmp_path / "c"
    emit_c(compile_model(path), folder)
    build_shared(folder)
    table = onnx.numpy_helper.to_array(model.graph.initializer[0])
    return CModel(folder), table


def test_runtime_index_out_of_range_is_reported_and_clamped(tmp_path: Path) -> None:
    """onnxruntime fails such a run; the C clamps (never reads outside the table) and returns
    OPFUSE_ERROR_INDEX from invoke, and ``CModel.run`` fails as onnxruntime does."""
    c_model, table = _embedding(tmp_path)
    ids = np.array([[1, 16, -17, 3, 0], [2, 2, 2, 2, 99]])
    c_model.write(c_model.bind({"ids": ids}))
    assert c_model.invoke() == 1
    rows = np.take(table, np.clip(ids, 0, 15), axis=0)
    np.testing.assert_allclose(c_model.outs[0], rows * rows, rtol=1e-6)
    with pytest.raises(OpfuseError, match="OPFUSE_ERROR_INDEX"):
        c_model.run({"ids": ids})
    c_model.write(c_model.bind({"ids": ids % 16}))
    assert c_model.invoke() == 0  # the status is reset by every invoke


def test_constant_index_out_of_range_names_the_node(tmp_path: Path) -> None:
    model = _weights(f"""{OPSET} g (float[2,6] x) => (float[2,2] y) {{
        y = Gather<axis=1>(x, picks)
    }}""", picks=np.array([1, 6]))
    model.graph.node[0].name = "select_bad"
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(OpfuseError, match=r"Gather node 'select_bad': index 6 is out of range"):
        emit_c(compile_model(path), tmp_path / "out")
    assert not (tmp_path / "out").exists()


VIEW_CASES = {
    # attention's scores: Q [1,2,5,4] @ K^T where K^T = Transpose(K [1,5,2,4], perm 0,2,3,1)
    "scores_k_transposed": onnx.parser.parse_model(f"""{OPSET} g (float[1,2,5,4] q,
        float[1,5,2,4] k) => (float[1,2,5,5] y) {{
        kt = Transpose<perm = [0, 2, 3, 1]>(k)
        s = MatMul(q, kt)
        y = Mul(s, half)
    }}"""),
    # a right operand [5, 2, 4] read as [2, 4, 5] (batch dim from the middle), broadcast to A's
    "right_batch_transposed": onnx.parser.parse_model(f"""{OPSET} g (float[3,1,2,4] a,
        float[5,2,4] b) => (float[3,2,2,5] y) {{
        bt = Transpose<perm = [1, 2, 0]>(b)
        y = MatMul(a, bt)
    }}"""),
    # only the last two dims swapped, odd k (the dot product's tail)
    "last_two_swapped": onnx.parser.parse_model(f"""{OPSET} g (float[2,9,11] a,
        float[2,13,11] b) => (float[2,9,13] y) {{
        bt = Transpose<perm = [0, 2, 1]>(b)
        y = MatMul(a, bt)
    }}"""),
}
VIEW_CASES["scores_k_transposed"].graph.initializer.append(
    onnx.numpy_helper.from_array(np.array(0.5, np.float32), "half"))


@pytest.mark.parametrize("case", list(VIEW_CASES))
def test_transpose_is_read_as_a_view_by_matmul(case: str, tmp_path: Path) -> None:
    """The Transpose joins the MatMul's kernel (analyze reports one kernel, the transposed tensor
    is never stored) and the C reads it through strides, matching onnxruntime."""
    path = tmp_path / f"{case}.onnx"
    onnx.save(VIEW_CASES[case], path)
    result = compile_model(path)
    (kernel,) = [k for k in result.partition.kernels if "MatMul" in k.ops]
    assert kernel.ops[:2] == ("Transpose", "MatMul"), kernel.ops
    assert len(result.partition.kernels) == 1
    for fuse in (True, False):
        _check(validate_c(path, fuse=fuse, outdir=tmp_path / f"c{fuse}"))


@pytest.mark.parametrize("case", ["embedding", "index_select", "mask_where", "range_expand_cast",
                                  "groupnorm_native"])
def test_sanitizers_are_clean(case: str, tmp_path: Path) -> None:
    model, _ = CASES[case]
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    folder = tmp_path / "c"
    emit_c(compile_model(path), folder)
    sanitized_run_matches(folder, path)


def test_view_matmul_sanitizers_are_clean(tmp_path: Path) -> None:
    path = tmp_path / "scores.onnx"
    onnx.save(VIEW_CASES["scores_k_transposed"], path)
    emit_c(compile_model(path), tmp_path / "c")
    sanitized_run_matches(tmp_path / "c", path)


def test_out_of_range_index_under_sanitizers_reads_nothing_outside(tmp_path: Path) -> None:
    """The demo harness built with ASan + UBSan: ids past both ends of the table give exit 3 and
    the OPFUSE_ERROR_INDEX line, and no sanitizer report (no read outside the table)."""
    model, _ = CASES["embedding"]
    path = tmp_path / "emb.onnx"
    onnx.save(model, path)
    folder = tmp_path / "c"
    emit_c(compile_model(path), folder)
    try:
        exe = build_executable(folder, SAN)
    except OpfuseError as exc:
        pytest.skip(f"no sanitizer runtime: {exc}")
    info = manifest(folder)
    ids = np.array([[1 << 40, 16, -17, 3, 0], [-(1 << 40), 2, 2, 2, 99]])
    with pytest.raises(OpfuseError, match="exit 3") as caught:
        run_executable(exe, info, {"ids": ids}, env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert "OPFUSE_ERROR_INDEX" in str(caught.value)
    assert "Sanitizer" not in str(caught.value) and "runtime error" not in str(caught.value)


def test_a_transposed_left_operand_stays_materialized(tmp_path: Path) -> None:
    """Reading A (or a B whose rows stay contiguous) in place was measured slower
    (benchmarks/matmul_views.py): the Transpose keeps its own kernel (``layout_change``)."""
    model = onnx.parser.parse_model(f"""{OPSET} g (float[3,2,6] x, float[6,7] b)
        => (float[2,3,7] y) {{
        t = Transpose<perm = [1, 0, 2]>(x)
        y = MatMul(t, b)
    }}""")
    path = tmp_path / "left.onnx"
    onnx.save(model, path)
    result = compile_model(path)
    assert [k.ops for k in result.partition.kernels] == [("Transpose",), ("MatMul",)]
    assert any(d.reason == "layout_change" for d in result.partition.decisions)
    _check(validate_c(path, outdir=tmp_path / "c"))


def test_per_kernel_check_takes_token_ids(tmp_path: Path, run_cli) -> None:
    """``validate --per-kernel`` draws int64 inputs as indices (0..9) and checks each kernel."""
    model, _ = CASES["embedding"]
    path = tmp_path / "emb.onnx"
    onnx.save(model, path)
    code, out, err = run_cli("validate", str(path), "--backend", "c", "--per-kernel")
    assert code == 0, err
    assert "all 2 kernels match" in out


def test_gelu_and_erf_are_epilogues_of_a_matmul(tmp_path: Path) -> None:
    """A Linear followed by Gelu (tanh form) and by the erf form's Erf: each joins the MatMul's
    kernel as an epilogue, and the fused C matches onnxruntime."""
    model = _weights("""<ir_version: 9, opset_import: ["" : 20]>
        g (float[2,5,8] x) => (float[2,5,6] a, float[2,5,6] b) {
        m1 = MatMul(x, w)
        a = Gelu<approximate="tanh">(m1)
        m2 = MatMul(x, w2)
        b = Erf(m2)
    }""", w=_rand(8, 6, seed=7), w2=_rand(8, 6, seed=8))
    path = tmp_path / "linear_gelu.onnx"
    onnx.save(model, path)
    ops = [k.ops for k in compile_model(path).partition.kernels]
    assert ("MatMul", "Gelu") in ops and ("MatMul", "Erf") in ops, ops
    _check(validate_c(path, outdir=tmp_path / "c"))
