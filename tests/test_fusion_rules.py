"""Partitioner rules one by one: BatchNorm, runtime operands, layout, dtype, names, random DAGs."""

from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.frontends import import_proto
from opfuse.fusion import trivial_partition
from opfuse.targets import list_targets
from tests.helpers.fusion import F, build, check_invariants, fuse, names, node, reasons, residual


def test_batchnorm_after_conv_with_weights_as_graph_input():
    model = build(
        [
            node("Conv", ["x", "w"], "c", "conv"),
            node("BatchNormalization", ["c", "S", "B", "M", "V"], "y", "bn"),
        ],
        inputs=("x", ("w", F, [4, 4, 1, 1])),
        weights=("S", "B", "M", "V"),
    )
    for target in ("npu-generic", "mobile-gpu", "cortex-m7"):
        part = fuse(model, target)
        assert reasons(part) == {("conv", "bn"): "non_constant_weights"}, target
        assert "'w' are not constants" in part.decisions[0].message


def test_batchnorm_with_constant_weights_joins_where_arith_is_accepted():
    model = build(
        [
            node("Conv", ["x", "W"], "c", "conv"),
            node("BatchNormalization", ["c", "S", "B", "M", "V"], "b", "bn"),
            node("Relu", ["b"], "y", "relu"),
        ],
        weights=("W", "S", "B", "M", "V"),
    )
    assert names(fuse(model, "npu-generic")) == ["fused_conv_batchnormalization_relu"]
    assert reasons(fuse(model, "cortex-m7")) == {("conv", "bn"): "not_supported_by_target"}


def test_runtime_scale_needs_a_second_tensor_read():
    model = build(
        [node("Conv", ["x", "W"], "c", "conv"), node("Mul", ["c", "s"], "y", "mul")],
        inputs=("x", ("s", F, [1, 4, 1, 1])),
        weights=("W",),
    )
    assert reasons(fuse(model, "cortex-a76")) == {("conv", "mul"): "non_constant_weights"}
    assert names(fuse(model, "mobile-gpu")) == ["fused_conv_mul"]


def test_layout_change_and_dtype_mismatch():
    model = build(
        [
            node("Conv", ["x", "W"], "c", "conv"),
            node("Transpose", ["c"], "t", "transpose", perm=[0, 1, 3, 2]),
            node("Relu", ["t"], "r", "relu"),
            node("Cast", ["r"], "y", "cast", to=TensorProto.FLOAT16),
        ],
        weights=("W",),
        out_type=TensorProto.FLOAT16,
    )
    part = fuse(model, "mobile-gpu")
    assert names(part) == ["conv", "transpose", "relu", "cast"]
    assert reasons(part) == {
        ("conv", "transpose"): "layout_change",
        ("transpose", "relu"): "layout_change",
        ("relu", "cast"): "dtype_mismatch",
    }


def test_gemm_activation_on_x86_and_elementwise_chains():
    graph = helper.make_graph(
        [
            node("Gemm", ["x", "G"], "g", "gemm", transB=1),
            node("Relu", ["g"], "y", "relu"),
            node("Mul", ["x", "x"], "m", "mul"),
            node("Sigmoid", ["m"], "s", "sigmoid"),
            node("Neg", ["s"], "z", "neg"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [1, 16])],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("z", F, None)],
        initializer=[numpy_helper.from_array(np.eye(16, dtype=np.float32), "G")],
    )
    model = import_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "t")
    assert sorted(names(fuse(model, "x86-host"))) == ["fused_gemm_relu", "fused_mul_sigmoid_neg"]
    m4 = fuse(model, "cortex-m4")
    assert sorted(names(m4)) == ["fused_gemm_relu", "mul", "neg", "sigmoid"]
    assert set(reasons(m4).values()) == {"not_supported_by_target"}


def test_repeated_kernel_names_get_suffixes():
    model = build(
        [
            node("Conv", ["x", "W"], "c1", "conv1"),
            node("Relu", ["c1"], "r1", "relu1"),
            node("Conv", ["r1", "W"], "c2", "conv2"),
            node("Relu", ["c2"], "y", "relu2"),
        ],
        weights=("W",),
    )
    assert names(fuse(model, "cortex-m7")) == ["fused_conv_relu", "fused_conv_relu_2"]


def test_trivial_partition_is_every_node_alone():
    model = residual()
    part = trivial_partition(model)
    assert part.target == "none" and part.decisions == ()
    assert names(part) == ["conv", "add", "relu"]
    assert [k.inputs for k in part.kernels] == [("x", "W"), ("c", "x"), ("a",)]
    assert [k.outputs for k in part.kernels] == [("c",), ("a",), ("y",)]
    check_invariants(model, part, decisions=False)


@pytest.mark.parametrize("seed", range(12))
def test_random_dags_keep_invariants_on_every_target(seed):
    rng = random.Random(seed)
    values, nodes = ["x"], []
    for i in range(14):
        op = rng.choice(["Conv", "Relu", "Sigmoid", "Add", "Mul", "Clip", "MaxPool", "Transpose"])
        a = rng.choice(values[-4:])
        if op in ("Add", "Mul"):
            nodes.append(node(op, [a, rng.choice(values)], f"v{i}"))
        elif op == "Conv":
            nodes.append(node(op, [a, "W"], f"v{i}"))
        elif op == "MaxPool":
            nodes.append(node(op, [a], f"v{i}", kernel_shape=[1, 1]))
        elif op == "Transpose":
            nodes.append(node(op, [a], f"v{i}", perm=[0, 1, 3, 2]))
        else:
            nodes.append(node(op, [a], f"v{i}"))
        values.append(f"v{i}")
    nodes.append(node("Relu", [values[-1]], "y"))
    model = build(nodes, weights=("W",))
    for target in list_targets():
        fuse(model, target)
