"""Partitioner on small hand-built graphs: kernel lists and reasons, as tinygrad's check_schedule."""

from __future__ import annotations

from tests.helpers.fusion import build, fuse, names, node, reasons, residual


def conv_act(act: str):
    return build(
        [node("Conv", ["x", "W", "B"], "c", "conv"), node(act, ["c"], "y", act.lower())],
        weights=("W", "B"),
    )


def test_conv_relu_is_one_kernel_on_cortex_m7():
    part = fuse(conv_act("Relu"), "cortex-m7")
    assert names(part) == ["fused_conv_relu"]
    (kernel,) = part.kernels
    assert kernel.nodes == ("conv", "relu") and kernel.ops == ("Conv", "Relu")
    assert kernel.inputs == ("x", "W", "B") and kernel.outputs == ("y",)
    assert part.decisions == () and part.target == "cortex-m7"


def test_conv_sigmoid_splits_on_cortex_m7_not_on_mobile_gpu():
    model = conv_act("Sigmoid")
    m7 = fuse(model, "cortex-m7")
    assert names(m7) == ["conv", "sigmoid"]
    (d,) = m7.decisions
    assert (d.producer, d.consumer, d.fused, d.reason) == (
        "conv",
        "sigmoid",
        False,
        "not_supported_by_target",
    )
    assert (
        d.message
        == "Sigmoid cannot join Conv on cortex-m7: its kernels apply only a clamp in the output stage"
    )
    assert m7.kernels[0].outputs == ("c",) and m7.kernels[1].inputs == ("c",)
    assert names(fuse(model, "mobile-gpu")) == ["fused_conv_sigmoid"]
    assert names(fuse(model, "ethos-u55")) == ["fused_conv_sigmoid"]


def test_residual_add_joins_conv_on_mobile_gpu_and_x86_only():
    model = residual()
    assert names(fuse(model, "mobile-gpu")) == ["fused_conv_add_relu"]
    assert names(fuse(model, "x86-host")) == ["fused_conv_add_relu"]
    m7 = fuse(model, "cortex-m7")
    assert names(m7) == ["conv", "fused_add_relu"]
    assert reasons(m7) == {("conv", "add"): "not_supported_by_target"}
    a76 = fuse(model, "cortex-a76")  # takes a constant bias, not a second activation
    assert names(a76) == ["conv", "fused_add_relu"]
    assert "second activation" in a76.decisions[0].message


def test_add_of_two_conv_groups_joins_one_and_says_why_not_the_other():
    model = build(
        [
            node("Conv", ["x", "W1"], "c1", "conv1"),
            node("Conv", ["x", "W2"], "c2", "conv2"),
            node("Add", ["c1", "c2"], "y", "add"),
        ],
        weights=("W1", "W2"),
    )
    part = fuse(model, "mobile-gpu")
    assert names(part) == ["conv", "fused_conv_add"]
    assert part.kernel_of("add").nodes == ("conv2", "add")
    assert reasons(part) == {("conv1", "add"): "other_producer_fused"}


def test_multiple_consumers_stay_materialized():
    model = build(
        [
            node("Conv", ["x", "W"], "c", "conv"),
            node("Relu", ["c"], "r", "relu"),
            node("Sigmoid", ["c"], "s", "sigmoid"),
            node("Add", ["r", "s"], "y", "add"),
        ],
        weights=("W",),
    )
    part = fuse(model, "mobile-gpu")
    assert names(part) == ["conv", "relu", "fused_sigmoid_add"]
    assert reasons(part) == {
        ("conv", "relu"): "multiple_consumers",
        ("conv", "sigmoid"): "multiple_consumers",
        ("relu", "add"): "other_producer_fused",
    }
    assert "read by 2 nodes" in part.decisions[0].message


def test_graph_output_stays_materialized():
    model = build(
        [node("Conv", ["x", "W"], "c", "conv"), node("Relu", ["c"], "y", "relu")],
        outputs=("c", "y"),
        weights=("W",),
    )
    part = fuse(model, "mobile-gpu")
    assert names(part) == ["conv", "relu"]
    assert reasons(part) == {("conv", "relu"): "graph_output"}
    assert part.kernels[0].outputs == ("c",)


def test_opaque_custom_op_is_named_as_the_blocker():
    model = build(
        [
            node("Conv", ["x", "W"], "c", "conv"),
            node("MyOp", ["c"], "m", "myop", domain="custom.ops"),
            node("Relu", ["m"], "y", "relu"),
        ],
        weights=("W",),
        value_info=("m",),
    )
    part = fuse(model, "mobile-gpu")
    assert names(part) == ["conv", "myop", "relu"]
    assert reasons(part) == {("conv", "myop"): "opaque_op", ("myop", "relu"): "opaque_op"}
    assert all("MyOp 'myop' (domain custom.ops)" in d.message for d in part.decisions)


def test_conv_relu_maxpool_on_npu_generic():
    model = build(
        [
            node("Conv", ["x", "W"], "c", "conv"),
            node("Relu", ["c"], "r", "relu"),
            node("MaxPool", ["r"], "y", "pool", kernel_shape=[2, 2], strides=[2, 2]),
        ],
        weights=("W",),
    )
    assert names(fuse(model, "npu-generic")) == ["fused_conv_relu_maxpool"]
    m7 = fuse(model, "cortex-m7")
    assert names(m7) == ["fused_conv_relu", "maxpool"]
    assert "cannot end with a pool" in m7.decisions[0].message


def test_pool_and_elementwise_take_an_activation_on_ethos_u55():
    model = build(
        [
            node("MaxPool", ["x"], "p", "pool", kernel_shape=[1, 1]),
            node("Sigmoid", ["p"], "s", "sigmoid"),
            node("Add", ["s", "x"], "a", "add"),
            node("Tanh", ["a"], "t", "tanh"),
            node("Relu", ["t"], "y", "relu"),
        ],
    )
    part = fuse(model, "ethos-u55")
    assert names(part) == ["fused_maxpool_sigmoid", "fused_add_tanh", "relu"]
    assert reasons(part) == {
        ("sigmoid", "add"): "not_supported_by_target",
        ("tanh", "relu"): "chain_limit",
    }
    assert names(fuse(model, "mobile-gpu")) == ["fused_maxpool_sigmoid_add_tanh_relu"]


def test_diamond_never_creates_a_cycle():
    # a -> {b, c} -> d -> e, with b also reading the graph input: d may join b's or c's kernel,
    # never both, and a stays materialized.
    model = build(
        [
            node("Conv", ["x", "W"], "a", "a"),
            node("Relu", ["a"], "b", "b"),
            node("Conv", ["a", "W2"], "c", "c"),
            node("Add", ["b", "c"], "d", "d"),
            node("Sigmoid", ["d"], "y", "e"),
        ],
        weights=("W", "W2"),
    )
    for target in ("mobile-gpu", "x86-host", "cortex-m7", "npu-generic"):
        fuse(model, target)  # invariants include schedule order
    gpu = fuse(model, "mobile-gpu")
    assert names(gpu) == ["conv", "relu", "fused_conv_add_sigmoid"]
    assert reasons(gpu)[("a", "b")] == "multiple_consumers"
    assert reasons(gpu)[("b", "d")] == "other_producer_fused"


def test_chain_limit():
    model = build(
        [
            node("Conv", ["x", "W"], "c", "conv"),
            node("Relu", ["c"], "r", "relu1"),
            node("Clip", ["r"], "y", "clip"),
        ],
        weights=("W",),
    )
    part = fuse(model, "cortex-m7")
    assert names(part) == ["fused_conv_relu", "clip"]
    (d,) = part.decisions
    assert d.reason == "chain_limit" and "max_chain = 2" in d.message
    assert names(fuse(model, "mobile-gpu")) == ["fused_conv_relu_clip"]
