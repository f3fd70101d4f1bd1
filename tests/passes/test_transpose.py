"""One test per layout rule (``opfuse/passes/transpose_*.py``): the structure after canonicalize,
and (through ``canonicalized``) onnx.checker, a fresh shape inference and onnxruntime's outputs on
the original model."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.helpers.passes import canonicalized, fired, make_model, op_counts, rng

NCHW, NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def order(model) -> list[str]:
    return [n.op_type for n in model.graph]


def test_unary_moves_and_cancels() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=NHWC),
        helper.make_node("Clip", ["t", "lo", "hi"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Transpose", ["s"], ["y"], perm=NCHW),
    ]
    inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
    _, after, counts = canonicalized(make_model(nodes, {"x": [1, 3, 4, 5]}, {"y": None}, inits))
    assert order(after) == ["Clip", "Sigmoid"]
    assert fired(counts) == {"push_transpose_unary": 2, "merge_transposes": 1}


def test_unary_stays_when_the_transpose_has_a_reader_it_cannot_pass() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=NHWC),
        helper.make_node("Relu", ["t"], ["y1"]),
        helper.make_node("Flatten", ["t"], ["y2"]),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [1, 3, 4, 5]}, {"y1": None, "y2": None}))
    assert op_counts(after)["Transpose"] == 1 and not fired(counts)


def test_affine_constant_is_permuted_and_folds_into_conv() -> None:
    gen = rng(1)
    inits = {
        "w": gen.standard_normal((6, 3, 3, 3)).astype(np.float32),
        "s": gen.uniform(0.5, 2, 6).astype(np.float32),  # NHWC per-channel: shape (C,)
        "b": gen.standard_normal((1, 1, 6)).astype(np.float32),  # lower rank, broadcast
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
        helper.make_node("Transpose", ["c"], ["t"], perm=NHWC),
        helper.make_node("Mul", ["t", "s"], ["m"]),
        helper.make_node("Add", ["b", "m"], ["y"]),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [1, 3, 5, 5]}, {"y": None}, inits))
    assert order(after) == ["Conv", "Transpose"]
    assert counts["push_transpose_affine"] == 2 and counts["fold_affine_into_linear"] == 2


def test_affine_full_constant_is_permuted() -> None:
    inits = {"k": rng(2).standard_normal((4, 5, 3)).astype(np.float32)}
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=NHWC),
        helper.make_node("Sub", ["k", "t"], ["s"]),
        helper.make_node("Transpose", ["s"], ["y"], perm=NCHW),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [2, 3, 4, 5]}, {"y": None}, inits))
    assert order(after) == ["Sub"]
    assert after.graph.node(0).inputs[0].shape == [1, 3, 4, 5]
    assert counts["push_transpose_affine"] == 1


def test_elementwise_two_transposes_and_a_reused_one() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["tx"], perm=NCHW),
        helper.make_node("MaxPool", ["tx"], ["y1"], kernel_shape=[2, 2]),  # keeps tx alive
        helper.make_node("Transpose", ["a"], ["ta"], perm=NHWC),
        helper.make_node("Transpose", ["b"], ["tb"], perm=NHWC),
        helper.make_node("Add", ["ta", "tb"], ["s"]),  # both transposed
        helper.make_node("Mul", ["s", "x"], ["m"]),  # x is read through the existing tx
        helper.make_node("Transpose", ["m"], ["y2"], perm=NCHW),
    ]
    shapes = {"x": [1, 4, 5, 3], "a": [1, 3, 4, 5], "b": [1, 3, 4, 5]}
    _, after, counts = canonicalized(make_model(nodes, shapes, {"y1": None, "y2": None}))
    assert op_counts(after) == {"Transpose": 1, "MaxPool": 1, "Add": 1, "Mul": 1}
    assert counts["push_transpose_elementwise"] == 2


def test_elementwise_needing_a_new_transpose_is_left_alone() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=NHWC),
        helper.make_node("Add", ["t", "z"], ["y"]),
    ]
    proto = make_model(nodes, {"x": [1, 3, 4, 5], "z": [1, 4, 5, 3]}, {"y": None})
    _, after, counts = canonicalized(proto)
    assert order(after) == ["Transpose", "Add"] and not fired(counts)


def test_pad_pads_are_permuted() -> None:
    inits = {"pads": np.array([0, 1, 2, 0, 0, 3, 0, 1], np.int64)}  # NHWC begins, ends
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=NHWC),
        helper.make_node("Pad", ["t", "pads"], ["p"], mode="reflect"),
        helper.make_node("Transpose", ["p"], ["y"], perm=NCHW),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [1, 2, 5, 6]}, {"y": None}, inits))
    assert order(after) == ["Pad"]
    pads = after.graph.node(0).inputs[1].const_value.numpy().tolist()
    assert pads == [0, 0, 1, 2, 0, 1, 3, 0]  # NCHW: C takes the NHWC last axis
    assert counts["push_transpose_pad"] == 1


def test_concat_axis_is_remapped() -> None:
    inits = {"k": rng(3).standard_normal((1, 4, 5, 2)).astype(np.float32)}
    nodes = [
        helper.make_node("Transpose", ["a"], ["ta"], perm=NHWC),
        helper.make_node("Transpose", ["b"], ["tb"], perm=NHWC),
        helper.make_node("Concat", ["ta", "k", "tb"], ["c"], axis=-1),
        helper.make_node("Transpose", ["c"], ["y"], perm=NCHW),
    ]
    proto = make_model(nodes, {"a": [1, 3, 4, 5], "b": [1, 1, 4, 5]}, {"y": None}, inits)
    _, after, counts = canonicalized(proto)
    assert order(after) == ["Concat"]
    assert after.graph.node(0).attributes.get_int("axis") == 1
    assert counts["push_transpose_concat"] == 1


def test_reduce_axes_are_remapped() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=NHWC),
        helper.make_node("ReduceMean", ["t"], ["m"], axes=[1, 2], keepdims=1),
        helper.make_node("Transpose", ["m"], ["y1"], perm=NCHW),
        helper.make_node("Transpose", ["x"], ["t2"], perm=NHWC),
        helper.make_node("ReduceSum", ["t2", "ax"], ["y2"], keepdims=0),
    ]
    inits = {"ax": np.array([2], np.int64)}
    proto = make_model(nodes, {"x": [2, 3, 4, 5]}, {"y1": None, "y2": None}, inits)
    _, after, counts = canonicalized(proto)
    assert op_counts(after) == {"ReduceMean": 1, "ReduceSum": 1, "Transpose": 1}
    assert counts["push_transpose_reduce"] == 2


def test_merge_with_a_shared_inner_transpose() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 2, 0]),
        helper.make_node("Transpose", ["t"], ["y1"], perm=[2, 0, 1]),  # inverse: cancels
        helper.make_node("Transpose", ["t"], ["u"], perm=[0, 2, 1]),  # composes
        helper.make_node("Relu", ["u"], ["y2"]),
        helper.make_node("Flatten", ["t"], ["y3"]),  # keeps the inner one
    ]
    proto = make_model(nodes, {"x": [2, 3, 4]}, {"y1": None, "y2": None, "y3": None})
    _, after, counts = canonicalized(proto)
    # y1 cancels to x (kept as an Identity: input -> output), y2 reads one merged Transpose
    assert op_counts(after) == {"Transpose": 2, "Identity": 1, "Relu": 1, "Flatten": 1}
    assert counts["merge_transposes"] == 2


def test_dedupe_equal_transposes() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=NHWC),
        helper.make_node("Transpose", ["x"], ["b"], perm=NHWC),
        helper.make_node("Flatten", ["a"], ["fa"]),
        helper.make_node("Flatten", ["b"], ["fb"]),
        helper.make_node("Add", ["fa", "fb"], ["y"]),
    ]
    _, after, counts = canonicalized(make_model(nodes, {"x": [1, 3, 4, 5]}, {"y": None}))
    assert op_counts(after)["Transpose"] == 1 and counts["dedupe_transposes"] == 1


def test_transpose_of_size_one_axes_is_a_reshape_or_vanishes() -> None:
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["g"]),
        helper.make_node("Transpose", ["g"], ["t"], perm=NHWC),  # (1,C,1,1) -> (1,1,1,C)
        helper.make_node("Flatten", ["t"], ["y1"]),
        helper.make_node("Transpose", ["z"], ["u"], perm=[1, 0, 2, 3]),  # swaps two 1s
        helper.make_node("Flatten", ["u"], ["y2"]),
    ]
    shapes = {"x": [1, 3, 4, 5], "z": [1, 1, 4, 5]}
    _, after, counts = canonicalized(make_model(nodes, shapes, {"y1": None, "y2": None}))
    assert "Transpose" not in op_counts(after)
    assert op_counts(after)["Reshape"] == 1
    assert counts["transpose_to_reshape"] == 2 and counts["remove_noop_reshape"] == 1


def test_quant_params_move_with_the_values() -> None:
    """Per-tensor parameters pass a Transpose unchanged; a per-channel axis is remapped."""
    from opfuse.passes import canonicalize
    from opfuse.quant import get_quant, make_params, set_quant
    from tests.helpers.passes import import_model

    inits = {"c": rng(4).uniform(0.5, 2, 3).astype(np.float32)}
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=NHWC),
        helper.make_node("Mul", ["t", "c"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=NCHW),
    ]
    model = import_model(make_model(nodes, {"x": [1, 3, 4, 5]}, {"y": None}, inits), raw=True)
    values = {v.name: v for n in model.graph for v in (*n.inputs, *n.outputs)}
    per_tensor = make_params(0.1, 3)
    for name in ("x", "t", "y"):  # a Transpose moves elements: the same params on both sides
        set_quant(values[name], per_tensor)
    set_quant(values["c"], make_params([0.1, 0.2, 0.3], 0, axis=0))
    set_quant(values["m"], make_params([0.5, 0.6, 0.7], 0, axis=3))  # NHWC channel axis
    set_quant(values["r"], per_tensor)
    canonicalize(model)
    assert [n.op_type for n in model.graph] == ["Mul", "Relu"]
    mul, relu = list(model.graph)
    assert get_quant(mul.inputs[1]).axis == 1  # (C,) -> (1, C, 1, 1)
    assert mul.inputs[1].const_value.numpy().shape == (1, 3, 1, 1)
    assert get_quant(mul.outputs[0]).axis == 1
    assert get_quant(relu.outputs[0]) == per_tensor
