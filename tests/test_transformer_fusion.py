"""Transformer fusions (opfuse/fusion/transformer.py): a Linear's bias on every target, GELU as
one epilogue whatever max_chain, Add + LayerNorm / RMSNorm with the sum as a second output; kernel
counts and reasons per target, near misses, traffic and lifetimes, and the C against onnxruntime."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, parser

from opfuse.cost.roofline import cost_model
from opfuse.pipeline import compile_model
from opfuse.schedule import Partition
from opfuse.targets import target_file

D, H = 16, 32
RNG = np.random.default_rng(0)


def _weights(model: onnx.ModelProto, **arrays: np.ndarray) -> onnx.ModelProto:
    model.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in arrays.items()
    )
    return model


def save(tmp_path: Path, name: str, text: str, **arrays: np.ndarray) -> Path:
    model = _weights(parser.parse_model(text), **arrays)
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def linear(tmp_path: Path, bias_shape: tuple[int, ...] = (H,), extra_reader: bool = False) -> Path:
    """MatMul -> Add(bias) -> Relu; ``extra_reader``: the product is also a graph output."""
    extra_out = ", float[1, 8, 32] m" if extra_reader else ""
    return save(
        tmp_path,
        "linear",
        f"""{HEADER}
        g (float[1, 8, 16] x) => (float[1, 8, 32] y{extra_out}) {{
            m = MatMul(x, W)
            s = Add(b, m)
            y = Relu(s)
        }}""",
        W=RNG.standard_normal((D, H)) * 0.3,
        b=RNG.standard_normal(bias_shape),
    )


def kernels(part: Partition) -> list[str]:
    return [k.name for k in part.kernels]


def reasons(part: Partition) -> dict[tuple[str, str], str]:
    return {(d.producer, d.consumer): d.reason for d in part.decisions}


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7", "x86-host", "mobile-gpu",
                                    "cortex-a76"])
def test_linear_bias_and_clamp_are_one_kernel_on_every_target(tmp_path: Path, target: str) -> None:
    # cortex-m: only a clamp in the output stage and max_chain = 2; the bias is not an epilogue
    result = compile_model(linear(tmp_path), target)
    assert kernels(result.partition) == ["fused_matmul_add_relu"], result.partition.decisions


def test_the_bias_is_read_once_and_the_product_never_stored(tmp_path: Path) -> None:
    result = compile_model(linear(tmp_path), "cortex-m7")
    cost = cost_model(result.optimized, result.partition, result.target)
    (k,) = cost.kernels
    assert k.activation_bytes_read == 8 * D * 4  # x only: m and s stay inside the kernel
    assert k.weight_bytes_read == (D * H + H) * 4  # W and b, once each
    assert k.bytes_written == 8 * H * 4  # y


def test_bias_not_along_the_last_dim_is_an_epilogue(tmp_path: Path) -> None:
    # a per-row-and-column table is arithmetic, which cortex-m's output stage does not take
    result = compile_model(linear(tmp_path, bias_shape=(8, H)), "cortex-m7")
    assert kernels(result.partition) == ["matmul", "fused_add_relu"]
    assert list(reasons(result.partition).values()) == ["not_supported_by_target"]
    x86 = compile_model(linear(tmp_path, bias_shape=(8, H)), "x86-host")
    assert kernels(x86.partition) == ["fused_matmul_add_relu"]


def test_bias_with_another_reader_of_the_product_is_refused(tmp_path: Path) -> None:
    result = compile_model(linear(tmp_path, extra_reader=True), "cortex-m7")
    assert kernels(result.partition) == ["matmul", "fused_add_relu"]
    assert list(reasons(result.partition).values()) == ["graph_output"]


def test_a_target_without_anchor_bias_refuses_it(tmp_path: Path) -> None:
    text = target_file("cortex-m7").read_text()
    custom = tmp_path / "nobias.toml"
    custom.write_text(text.replace('name = "cortex-m7"', 'name = "nobias"').replace(
        "[fusion]\n", "[fusion]\nanchor_bias = false\n"))
    result = compile_model(linear(tmp_path), str(custom))
    assert kernels(result.partition) == ["matmul", "fused_add_relu"]
    assert list(reasons(result.partition).values()) == ["not_supported_by_target"]


def mlp(tmp_path: Path) -> Path:
    """Linear -> erf GELU -> Linear, as ViT's MLP exports at opset 17."""
    return save(
        tmp_path,
        "mlp",
        f"""{HEADER}
        g (float[1, 8, 16] x) => (float[1, 8, 16] y) {{
            m1 = MatMul(x, W1)
            h = Add(m1, b1)
            d = Div(h, sqrt2)
            e = Erf(d)
            a = Add(e, one)
            p = Mul(h, a)
            gl = Mul(p, half)
            m2 = MatMul(gl, W2)
            y = Add(m2, b2)
        }}""",
        W1=RNG.standard_normal((D, H)) * 0.3, b1=RNG.standard_normal(H),
        W2=RNG.standard_normal((H, D)) * 0.3, b2=RNG.standard_normal(D),
        sqrt2=np.float32(np.sqrt(2)), one=np.float32(1), half=np.float32(0.5),
    )


@pytest.mark.parametrize(
    ("target", "count"), [("x86-host", 2), ("mobile-gpu", 2), ("cortex-m7", 3), ("cortex-m4", 3)]
)
def test_vit_mlp_kernel_counts(tmp_path: Path, target: str, count: int) -> None:
    result = compile_model(mlp(tmp_path), target)
    names = kernels(result.partition)
    assert len(names) == count, names
    expected = "fused_matmul_add_gelu" if count == 2 else "gelu"
    assert expected in names


def conv_gelu(tmp_path: Path) -> Path:
    """Conv + bias Add (per channel) + tanh GELU, as ConvNeXt-style blocks export."""
    return save(
        tmp_path,
        "conv_gelu",
        f"""{HEADER}
        g (float[1, 4, 6, 6] x) => (float[1, 8, 6, 6] y) {{
            c = Conv<pads = [1, 1, 1, 1]>(x, Wc)
            h = Add(c, bc)
            cu = Pow(h, three)
            cm = Mul(cu, cubic)
            i = Add(h, cm)
            t0 = Mul(i, k)
            t = Tanh(t0)
            a = Add(t, one)
            p = Mul(h, a)
            y = Mul(p, half)
        }}""",
        Wc=RNG.standard_normal((8, 4, 3, 3)) * 0.3, bc=RNG.standard_normal((1, 8, 1, 1)),
        three=np.float32(3), cubic=np.float32(0.044715), k=np.float32(np.sqrt(2 / np.pi)),
        one=np.float32(1), half=np.float32(0.5),
    )


@pytest.mark.parametrize(("target", "count"), [("x86-host", 1), ("mobile-gpu", 1),
                                               ("cortex-m7", 2)])
def test_conv_bias_tanh_gelu_kernel_counts(tmp_path: Path, target: str, count: int) -> None:
    result = compile_model(conv_gelu(tmp_path), target)
    assert [k.ops for k in result.partition.kernels] == (
        [("Conv", "Gelu")] if count == 1 else [("Conv",), ("Gelu",)])


def test_gelu_joins_even_with_max_chain_2(tmp_path: Path) -> None:
    text = target_file("x86-host").read_text()
    custom = tmp_path / "short.toml"
    custom.write_text(text.replace('name = "x86-host"', 'name = "short"').replace(
        "max_chain = 4", "max_chain = 2"))
    result = compile_model(mlp(tmp_path), str(custom))
    assert kernels(result.partition) == ["fused_matmul_add_gelu", "fused_matmul_add"]


def prenorm(tmp_path: Path, early_reader: bool = False, axis: int = -1,
            norm: str = "LayerNormalization") -> Path:
    """s = x + r; y = norm(s); z = MatMul(y, W) + s (the next residual reads s).
    ``early_reader``: a Neg of s is listed before the norm."""
    inputs = "s, g, be" if norm == "LayerNormalization" else "s, g"
    opset = 17 if norm == "LayerNormalization" else 23
    early = "q = Neg(s)" if early_reader else ""
    outs = ", float[1, 8, 16] q" if early_reader else ""
    return save(
        tmp_path,
        "prenorm",
        f"""<ir_version: 8, opset_import: ["" : {opset}]>
        g (float[1, 8, 16] x, float[1, 8, 16] r) => (float[1, 8, 16] z{outs}) {{
            s = Add(x, r)
            {early}
            y = {norm}<axis = {axis}>({inputs})
            m = MatMul(y, W)
            z = Add(m, s)
        }}""",
        W=RNG.standard_normal((D, D)) * 0.3, g=RNG.standard_normal(D), be=RNG.standard_normal(D),
    )


def test_add_layernorm_is_one_kernel_storing_the_sum(tmp_path: Path) -> None:
    result = compile_model(prenorm(tmp_path), "cortex-m7")
    part = result.partition
    fused = [k for k in part.kernels if k.ops == ("Add", "LayerNormalization")]
    assert len(fused) == 1, kernels(part)
    (kernel,) = fused
    assert set(kernel.outputs) == {"s", "y"}  # the sum is the kernel's second output
    # traffic: x and r read once, s and y written once, s never read back by the norm
    cost = cost_model(result.optimized, part, result.target, activations_only=True)
    k = next(c for c in cost.kernels if c.name == kernel.name)
    assert (k.activation_bytes_read, k.bytes_written) == (2 * 8 * D * 4, 2 * 8 * D * 4)
    # the plan keeps s alive until the residual Add that reads it last
    plan = result.schedule().plan
    life = {t.name: t for t in plan.tensors}
    step = [i for i, kk in enumerate(part.kernels) if "s" in kk.inputs]
    assert life["s"].first == part.kernels.index(kernel) and life["s"].last == max(step)
    assert life["s"].last > life["y"].first


def test_a_standalone_add_and_its_norm_fuse_on_x86_too(tmp_path: Path) -> None:
    # the block's first Add has no anchor before it
    result = compile_model(prenorm(tmp_path), "x86-host")
    assert ("Add", "LayerNormalization") in [k.ops for k in result.partition.kernels]


def residual_block(tmp_path: Path, shape: str = "1, 8, 16") -> Path:
    """res = MatMul(x, W) + b + x; y = LayerNorm(res); z = y + res (the next residual)."""
    return save(
        tmp_path,
        "residual",
        f"""{HEADER}
        g (float[{shape}] x) => (float[{shape}] z) {{
            m = MatMul(x, W)
            o = Add(m, b)
            res = Add(o, x)
            y = LayerNormalization<axis = -1>(res, g, be)
            z = Add(res, y)
        }}""",
        W=RNG.standard_normal((D, D)) * 0.3, b=RNG.standard_normal(D),
        g=RNG.standard_normal(D), be=RNG.standard_normal(D),
    )


@pytest.mark.parametrize(
    ("target", "ops"),
    [
        ("x86-host", [("MatMul", "Add", "Add", "LayerNormalization"), ("Add",)]),
        ("mobile-gpu", [("MatMul", "Add", "Add", "LayerNormalization"), ("Add",)]),
        ("cortex-m7", [("MatMul", "Add"), ("Add", "LayerNormalization"), ("Add",)]),
    ],
)
def test_residual_block_kernels(tmp_path: Path, target: str, ops: list) -> None:
    result = compile_model(residual_block(tmp_path), target)
    kernels_ = result.partition.kernels
    assert [k.ops for k in kernels_] == ops
    norm_kernel = next(k for k in kernels_ if k.ops[-1] == "LayerNormalization")
    assert set(norm_kernel.outputs) == {"res", "y"}


def postnorm(tmp_path: Path) -> Path:
    """BERT's post-norm block: y = LayerNorm(MatMul(x, W) + b + x); the sum has one reader."""
    return save(
        tmp_path,
        "postnorm",
        f"""{HEADER}
        g (float[1, 8, 16] x) => (float[1, 8, 16] y) {{
            m = MatMul(x, W)
            o = Add(m, b)
            res = Add(o, x)
            y = LayerNormalization<axis = -1>(res, g, be)
        }}""",
        W=RNG.standard_normal((D, D)) * 0.3, b=RNG.standard_normal(D),
        g=RNG.standard_normal(D), be=RNG.standard_normal(D),
    )


def test_postnorm_block_is_one_kernel_and_stores_no_sum(tmp_path: Path) -> None:
    result = compile_model(postnorm(tmp_path), "x86-host")
    (kernel,) = result.partition.kernels
    assert kernel.ops == ("MatMul", "Add", "Add", "LayerNormalization")
    assert kernel.outputs == ("y",)  # the sum lives in a row buffer of the kernel
    m7 = compile_model(postnorm(tmp_path), "cortex-m7")
    assert [k.ops for k in m7.partition.kernels] == [("MatMul", "Add"), ("Add", "LayerNormalization")]


def test_a_target_without_anchor_norm_refuses_it(tmp_path: Path) -> None:
    text = target_file("x86-host").read_text()
    custom = tmp_path / "nonorm.toml"
    custom.write_text(text.replace('name = "x86-host"', 'name = "nonorm"').replace(
        "anchor_norm = true", "anchor_norm = false"))
    result = compile_model(residual_block(tmp_path), str(custom))
    assert [k.ops for k in result.partition.kernels] == [
        ("MatMul", "Add", "Add"), ("LayerNormalization",), ("Add",)]
    assert any(d.reason == "not_supported_by_target" and "anchor_norm = false" in d.message
               for d in result.partition.decisions)


def test_a_reader_of_the_sum_before_the_norm_refuses(tmp_path: Path) -> None:
    result = compile_model(prenorm(tmp_path, early_reader=True), "cortex-m7")
    part = result.partition
    assert ("Add", "LayerNormalization") not in [k.ops for k in part.kernels]
    assert any(d.reason == "multiple_consumers" and "before LayerNormalization runs" in d.message
               for d in part.decisions)


def test_a_norm_over_more_than_the_last_axis_refuses(tmp_path: Path) -> None:
    result = compile_model(prenorm(tmp_path, axis=1), "cortex-m7")
    part = result.partition
    assert ("Add", "LayerNormalization") not in [k.ops for k in part.kernels]
    assert any("not the last axis" in d.message for d in part.decisions)


def test_add_rmsnorm_is_one_kernel(tmp_path: Path) -> None:
    result = compile_model(prenorm(tmp_path, norm="RMSNormalization"), "cortex-m7")
    assert ("Add", "RMSNormalization") in [k.ops for k in result.partition.kernels]


def llama_block(tmp_path: Path) -> Path:
    """h = x + r; RMSNorm(h) written out as Llama exports it at opset 17; MatMul; + h."""
    return save(
        tmp_path,
        "llama",
        f"""{HEADER}
        g (float[1, 8, 16] x, float[1, 8, 16] r) => (float[1, 8, 16] z) {{
            h = Add(x, r)
            sq = Pow(h, two)
            ms = ReduceMean<axes = [-1], keepdims = 1>(sq)
            ve = Add(ms, eps)
            rt = Sqrt(ve)
            inv = Reciprocal(rt)
            nx = Mul(h, inv)
            y = Mul(w, nx)
            m = MatMul(y, W)
            z = Add(m, h)
        }}""",
        two=np.float32(2), eps=np.float32(1e-6), w=RNG.standard_normal(D),
        W=RNG.standard_normal((D, D)) * 0.3,
    )


def test_llama_rmsnorm_with_its_residual_is_one_kernel(tmp_path: Path) -> None:
    result = compile_model(llama_block(tmp_path), "cortex-m7")
    assert [k.ops for k in result.partition.kernels] == [
        ("Add", "RMSNormalization"), ("MatMul",), ("Add",)]


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@needs_gcc
@pytest.mark.parametrize("target", ["cortex-m7", "x86-host"])
@pytest.mark.parametrize(
    "build", [mlp, prenorm, llama_block, linear, residual_block, conv_gelu, postnorm])
def test_c_matches_onnxruntime(tmp_path: Path, run_cli, target: str, build) -> None:  # noqa: ANN001
    path = build(tmp_path)
    code, out, err = run_cli("validate", str(path), "--backend", "c", "--target", target)
    assert code == 0 and "result: match" in out, out + err


@needs_gcc
def test_c_gemm_with_its_row_norm_matches_onnxruntime(tmp_path: Path, run_cli) -> None:  # noqa: ANN001
    # a 2-D MatMul + bias is canonicalized into a Gemm with C; the norm rides its row loop too
    path = residual_block(tmp_path, "8, 16")
    result = compile_model(path, "x86-host")
    assert [k.ops for k in result.partition.kernels] == [
        ("Gemm", "Add", "LayerNormalization"), ("Add",)]
    code, out, err = run_cli("validate", str(path), "--backend", "c")
    assert code == 0 and "result: match" in out, out + err


@needs_gcc
def test_c_rmsnorm_alone_matches_onnxruntime(tmp_path: Path, run_cli) -> None:  # noqa: ANN001
    text = """<ir_version: 10, opset_import: ["" : 23]>
        g (float[2, 5, 16] x) => (float[2, 5, 16] y) {
            y = RMSNormalization<epsilon = 0.001>(x, w)
        }"""
    path = save(tmp_path, "rms", text, w=RNG.standard_normal(D))
    code, out, err = run_cli("validate", str(path), "--backend", "c")
    assert code == 0 and "result: match" in out, out + err
