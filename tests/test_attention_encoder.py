"""A self-attention block as torch exports it (projections, head Transposes, a computed mask, the
core, the output projection): the attention kernel joins the Transposes around it and keeps a
topological schedule, numerically equal to onnxruntime through the C."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from opfuse.api import validate_c
from opfuse.pipeline import compile_model
from opfuse.schedule import Partition

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def attention_kernels(partition: Partition) -> list:
    return [k for k in partition.kernels if k.name.startswith("attention")]


def projected(bias: bool = True) -> onnx.ModelProto:
    """An encoder's self-attention as torch exports it: projections, Reshape, Transposes (Kt by
    perm 0,2,3,1), a mask computed from an input, the core, a bias Add the x86-host partition
    first fuses into the context MatMul (or, without ``bias``, the heads' Transpose right after
    it), and the output projection."""
    rng = np.random.default_rng(3)
    s, heads, dh = 12, 2, 8
    hidden = heads * dh
    text = f"""
    <ir_version: 8, opset_import: ["" : 17]>
    enc (float[1, {s}, {hidden}] x, float[1, {s}] keep) => (float[1, {s}, {hidden}] y) {{
        q0 = MatMul(x, wq)
        k0 = MatMul(x, wk)
        v0 = MatMul(x, wv)
        q1 = Reshape(q0, split)
        k1 = Reshape(k0, split)
        v1 = Reshape(v0, split)
        q = Transpose<perm = [0, 2, 1, 3]>(q1)
        kt = Transpose<perm = [0, 2, 3, 1]>(k1)
        v = Transpose<perm = [0, 2, 1, 3]>(v1)
        s0 = MatMul(q, kt)
        s1 = Mul(s0, scale)
        m0 = Sub(one, keep)
        m1 = Mul(m0, big)
        m2 = Reshape(m1, mshape)
        s2 = Add(s1, m2)
        p = Softmax<axis = -1>(s2)
        c0 = MatMul(p, v)
        c1 = {"Add(c0, cb)" if bias else "Identity(c0)"}
        c2 = Transpose<perm = [0, 2, 1, 3]>({"c1" if bias else "c0"})
        c3 = Reshape(c2, merge)
        y = MatMul(c3, wo)
    }}"""
    model = onnx.parser.parse_model(text)
    weights = {name: rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.3
               for name in ("wq", "wk", "wv", "wo")}
    weights |= {"split": np.array([1, s, heads, dh], np.int64),
                "merge": np.array([1, s, hidden], np.int64),
                "mshape": np.array([1, 1, 1, s], np.int64),
                "scale": np.array(dh ** -0.5, np.float32), "one": np.array(1.0, np.float32),
                "big": np.array(-1e4, np.float32),
                "cb": rng.standard_normal(dh).astype(np.float32)}
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in weights.items())
    if not bias:  # the Identity only kept the text one graph; c1 is unused
        keep = [node for node in model.graph.node if node.op_type != "Identity"]
        del model.graph.node[:]
        model.graph.node.extend(keep)
    onnx.checker.check_model(model, full_check=True)
    return model


@needs_gcc
@pytest.mark.parametrize("target", ["x86-host", "cortex-m7"])
def test_heads_transpose_after_the_core_joins_it(target: str, tmp_path: Path) -> None:
    """O's Transpose (heads back beside the width) is written by the kernel at permuted row
    offsets: four Transposes in the kernel, which writes the transposed value."""
    path = tmp_path / "enc.onnx"
    onnx.save(projected(bias=False), path)
    result = compile_model(path, target)
    (kernel,) = attention_kernels(result.partition)
    assert kernel.ops.count("Transpose") == 4 and kernel.ops[-1] == "Transpose"
    assert kernel.outputs == ("c2",)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 12, 16)).astype(np.float32),
             "keep": (np.arange(12) < 9).astype(np.float32)[None]}
    report = validate_c(path, target, inputs=feeds)
    assert report.ok, report
    for out in report.outputs:
        assert out.max_abs_err <= 1e-5 * out.max_ref + 1e-6, out


@pytest.mark.parametrize("target", ["x86-host", "cortex-m7"])
def test_encoder_block_keeps_a_topological_schedule(target: str, tmp_path: Path) -> None:
    """Transposes of Q, Kt and V join the core (read through permuted strides); the bias Add
    that had joined the context MatMul stays a kernel of its own, after the core."""
    path = tmp_path / "enc.onnx"
    onnx.save(projected(), path)
    result = compile_model(path, target)
    part = result.partition
    (kernel,) = attention_kernels(part)
    assert kernel.ops.count("Transpose") == 3
    position = {n: i for i, k in enumerate(part.kernels) for n in k.nodes}
    written = {o: position[k.nodes[-1]] for k in part.kernels for o in k.outputs}
    for i, k in enumerate(part.kernels):  # every value a kernel reads was written before it
        assert all(written.get(v, -1) < i for v in k.inputs), k
    if shutil.which("gcc") is not None:
        feeds = {"x": np.random.default_rng(0).standard_normal((1, 12, 16)).astype(np.float32),
                 "keep": (np.arange(12) < 9).astype(np.float32)[None]}
        report = validate_c(path, target, inputs=feeds)
        assert report.ok, report
        for out in report.outputs:
            assert out.max_abs_err <= 1e-5 * out.max_ref + 1e-6, out
