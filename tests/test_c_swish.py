"""Swish (opfuse/passes/swish.py) in the partition and the C: a Conv's SiLU is its epilogue, a
standalone SiLU joins an elementwise chain, and Conv -> SiLU -> Conv streams rows in a cascade
(on cortex-m7 with the Swish a member of its own);
every C build against onnxruntime on the original model (docs/architecture.md, "Transformer
fusions")."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, parser

from opfuse.analysis import analyze
from opfuse.backends.c import emit_c
from opfuse.pipeline import compile_model
from tests.helpers.c_cascade import check_against_onnxruntime

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
RNG = np.random.default_rng(0)
HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def save(tmp_path: Path, name: str, text: str, **arrays) -> Path:
    model = parser.parse_model(f"{HEADER}\n{text}")
    model.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in arrays.items()
    )
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def conv_silu(tmp_path: Path, scaled: bool = False) -> Path:
    """Conv -> SiLU as exporters write it (the Conv's output read twice); ``scaled``: the
    Sigmoid reads 1.702 * c (the sigmoid approximation of GELU)."""
    gate = "a = Mul(c, alpha)\n s = Sigmoid(a)" if scaled else "s = Sigmoid(c)"
    return save(
        tmp_path,
        "conv_silu",
        f"""g (float[1, 4, 6, 6] x) => (float[1, 8, 6, 6] y) {{
            c = Conv<pads = [1, 1, 1, 1]>(x, W, b)
            {gate}
            y = Mul(s, c)
        }}""",
        W=RNG.standard_normal((8, 4, 3, 3)) * 0.3, b=RNG.standard_normal(8), alpha=np.float32(1.702),
    )


def expand_silu_project(tmp_path: Path) -> Path:
    """1x1 Conv 4 -> 32 channels, SiLU, 1x1 Conv back to 4: the wide middle tensor is what a
    cascade avoids storing (rows of 64 columns: x86-host streams rows from 56)."""
    return save(
        tmp_path,
        "expand_silu_project",
        """g (float[1, 4, 16, 64] x) => (float[1, 4, 16, 64] y) {
            c = Conv(x, W1, b1)
            s = Sigmoid(c)
            h = Mul(c, s)
            y = Conv(h, W2, b2)
        }""",
        W1=RNG.standard_normal((32, 4, 1, 1)) * 0.4, b1=RNG.standard_normal(32),
        W2=RNG.standard_normal((4, 32, 1, 1)) * 0.2, b2=RNG.standard_normal(4),
    )


@pytest.mark.parametrize("scaled", [False, True])
def test_conv_silu_is_one_kernel_on_x86(tmp_path: Path, scaled: bool) -> None:
    result = compile_model(conv_silu(tmp_path, scaled), "x86-host")
    assert [k.ops for k in result.partition.kernels] == [("Conv", "Swish")]


def test_cortex_m7_keeps_only_a_clamp_in_the_conv(tmp_path: Path) -> None:
    # CMSIS-NN's output stage clamps; Swish is its own kernel there, but one instead of two
    result = compile_model(conv_silu(tmp_path), "cortex-m7")
    assert [k.ops for k in result.partition.kernels] == [("Conv",), ("Swish",)]


def test_conv_silu_conv_cascades(tmp_path: Path) -> None:
    path = expand_silu_project(tmp_path)
    result = compile_model(path, "x86-host")
    (cascade,) = result.partition.kernels
    assert [m.ops for m in cascade.members] == [("Conv", "Swish"), ("Conv",)]
    after = analyze(result, precision="fp32").after
    # the 32-channel middle tensor (128 KiB) is never stored whole
    assert after.plan.peak_bytes < 32 * 16 * 64 * 4
    if shutil.which("gcc") is not None:
        emit_c(result, tmp_path / "c", cascades=True)
        assert "_cascade(" in (tmp_path / "c" / "model.c").read_text()
        check_against_onnxruntime(path, tmp_path / "c")


def test_conv_silu_conv_cascades_on_cortex_m7_with_swish_its_own_member(tmp_path: Path) -> None:
    # the Swish written in place over the Conv's output shares its buffer: once both are rings
    # the buffer leaves the arena (fusion/cascade.py), so the cascade pays here too
    path = expand_silu_project(tmp_path)
    result = compile_model(path, "cortex-m7")
    (cascade,) = result.partition.kernels
    assert [m.ops for m in cascade.members] == [("Conv",), ("Swish",), ("Conv",)]
    after = analyze(result, precision="fp32").after
    assert after.plan.peak_bytes < 32 * 16 * 64 * 4
    if shutil.which("gcc") is not None:
        emit_c(result, tmp_path / "c", cascades=True)
        check_against_onnxruntime(path, tmp_path / "c")


@needs_gcc
@pytest.mark.parametrize("scaled", [False, True])
def test_c_conv_silu_matches_onnxruntime(tmp_path: Path, run_cli, scaled: bool) -> None:  # noqa: ANN001
    path = conv_silu(tmp_path, scaled)
    code, out, err = run_cli("validate", str(path), "--backend", "c", "--target", "x86-host")
    assert code == 0 and "result: match" in out, out + err


@needs_gcc
def test_c_standalone_silu_chain_matches_onnxruntime(tmp_path: Path, run_cli) -> None:  # noqa: ANN001
    # no anchor before it: the bias Add, the Swish and the Add after it are one elementwise kernel
    path = save(
        tmp_path,
        "silu_chain",
        """g (float[1, 8, 5, 7] x) => (float[1, 8, 5, 7] y) {
            h = Add(x, b)
            s = Sigmoid(h)
            m = Mul(h, s)
            y = Add(m, b)
        }""",
        b=RNG.standard_normal((1, 8, 1, 1)),
    )
    result = compile_model(path, "x86-host")
    assert [k.ops for k in result.partition.kernels] == [("Add", "Swish", "Add")]
    code, out, err = run_cli("validate", str(path), "--backend", "c", "--target", "x86-host")
    assert code == 0 and "result: match" in out, out + err
