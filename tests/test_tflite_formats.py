"""Formats beyond one op per file: sparse weights (DENSIFY), uint8 quantization, CUSTOM ops."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.tflite_builder import RELU, SAME, TfliteBuilder, check_against_tflite

F32 = np.float32
RNG = np.random.default_rng(11)


def _sparse_fc(b, block: bool):
    """FULLY_CONNECTED on DENSIFY of a sparse constant: CSR rows, or 1x4 blocks."""
    rng = np.random.default_rng(3)
    dense = rng.standard_normal((6, 8)).astype(F32)
    keep = rng.random((6, 2)) < 0.5
    segments, indices, values = [0], [], []
    for r in range(6):
        for c in range(2):
            if not keep[r, c]:
                dense[r, 4 * c : 4 * c + 4] = 0
        if block:
            for c in range(2):
                if keep[r, c]:
                    indices.append(c)
                    values += dense[r, 4 * c : 4 * c + 4].tolist()
        else:
            nz = np.nonzero(dense[r])[0]
            indices += nz.tolist()
            values += dense[r, nz].tolist()
        segments.append(len(indices))
    if block:
        sparsity = {"traversal_order": [0, 1, 2, 3], "block_map": [0, 1],
                    "dim_metadata": [("dense", 6), ("csr", segments, indices), ("dense", 1),
                                     ("dense", 4)]}
    else:
        sparsity = {"traversal_order": [0, 1],
                    "dim_metadata": [("dense", 6), ("csr", segments, indices)]}
    x = b.input("x", (1, 8), F32)
    packed = b.tensor("ws", (6, 8), F32, data=np.asarray(values, F32), sparsity=sparsity)
    w = b.tensor("w", (6, 8), F32)
    b.op("DENSIFY", [packed], [w])
    y = b.tensor("y", (1, 6), F32)
    b.op("FULLY_CONNECTED", [x, w, -1], [y], "FullyConnectedOptions")
    return y, dense


@pytest.mark.parametrize("block", [False, True])
def test_densify_of_sparse_weights_is_folded(tmp_path, block):
    from opfuse.pipeline import read

    b = TfliteBuilder()
    y, dense = _sparse_fc(b, block)
    b.output(y)
    path = tmp_path / "sparse.tflite"
    path.write_bytes(b.build())
    proto = read(path)
    assert [n.op_type for n in proto.graph.node] == ["Gemm"]
    weights = {t.name: t for t in proto.graph.initializer}
    from onnx import numpy_helper

    assert any(np.array_equal(numpy_helper.to_array(t), dense) for t in weights.values())
    check_against_tflite(path, None)


def test_uint8_model_runs_in_litert(tmp_path):
    """uint8 quantization (zero point 128): TFLite Micro has no uint8 kernels, LiteRT has."""
    b = TfliteBuilder()
    x = b.input("x", (1, 6, 6, 3), np.uint8, scale=0.05, zero_point=128)
    w = b.const("w", RNG.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8), scale=0.01,
                zero_point=120)
    bias_t = b.const("b", RNG.integers(-300, 300, 4).astype(np.int32), scale=0.0005)
    y = b.tensor("y", (1, 6, 6, 4), np.uint8, scale=0.1, zero_point=100)
    b.op("CONV_2D", [x, w, bias_t], [y], "Conv2DOptions", Padding=SAME, StrideH=1, StrideW=1,
         DilationHFactor=1, DilationWFactor=1, FusedActivationFunction=RELU)
    b.output(y)
    path = tmp_path / "uint8.tflite"
    path.write_bytes(b.build())
    assert check_against_tflite(path, 2).kind == "litert"


def test_custom_op_is_an_opaque_node_with_the_models_shapes(tmp_path):
    from opfuse.frontends.tflite.ops_shape import CUSTOM_DOMAIN
    from opfuse.pipeline import compile_model, read

    b = TfliteBuilder()
    x = b.input("x", (1, 6, 6, 3), F32)
    h = b.tensor("h", (1, 6, 6, 4), F32)
    w = b.const("w", RNG.standard_normal((4, 3, 3, 3)).astype(F32))
    b.op("CONV_2D", [x, w, b.const("b", np.zeros(4, F32))], [h],
         "Conv2DOptions", Padding=SAME, StrideH=1, StrideW=1, DilationHFactor=1,
         DilationWFactor=1)
    y = b.tensor("y", (1, 3, 3, 4), np.int8)
    b.op("CUSTOM", [h], [y], custom_code="MyPool", custom_options=b"\x01\x02")
    b.output(y)
    path = tmp_path / "custom.tflite"
    path.write_bytes(b.build())
    proto = read(path)
    node = next(n for n in proto.graph.node if n.domain == CUSTOM_DOMAIN)
    assert node.op_type == "MyPool"
    info = {v.name: v for v in proto.graph.value_info}[node.output[0]]
    assert [d.dim_value for d in info.type.tensor_type.shape.dim] == [1, 3, 3, 4]
    assert info.type.tensor_type.elem_type == 3  # int8, as the model says
    graph = compile_model(path).optimized.graph
    assert [n.op_type for n in graph if n.domain == CUSTOM_DOMAIN] == ["MyPool"]
