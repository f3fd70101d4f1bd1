"""Must-show of layout canonicalization: a tf2onnx-style NHWC network keeps only its boundary
Transposes and every NHWC BatchNorm (Mul/Add between Transpose pairs) folds into its Conv."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.helpers.passes import canonicalized, make_model, op_counts, rng

TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def nhwc_resnet(blocks: int, c: int = 4, hw: int = 5, seed: int = 0) -> onnx.ModelProto:
    """What tf2onnx writes for Keras Conv2D + BatchNormalization + ReLU with residual Adds: every
    Conv wrapped in NHWC->NCHW / NCHW->NHWC Transposes, the BatchNorm a per-channel Mul and Add
    on the last (channel) axis."""
    gen = rng(seed)
    nodes, inits = [], {}
    x = "x"

    def conv_bn(inp: str, tag: str, relu: bool) -> str:
        inits[f"{tag}_w"] = (gen.standard_normal((c, c, 3, 3)) * 0.3).astype(np.float32)
        inits[f"{tag}_b"] = gen.standard_normal(c).astype(np.float32) * 0.1
        inits[f"{tag}_s"] = gen.uniform(0.5, 1.5, c).astype(np.float32)
        inits[f"{tag}_t"] = gen.standard_normal(c).astype(np.float32) * 0.1
        nodes.extend([
            helper.make_node("Transpose", [inp], [f"{tag}_in"], perm=TO_NCHW),
            helper.make_node("Conv", [f"{tag}_in", f"{tag}_w", f"{tag}_b"], [f"{tag}_c"], pads=[1] * 4),
            helper.make_node("Transpose", [f"{tag}_c"], [f"{tag}_out"], perm=TO_NHWC),
            helper.make_node("Mul", [f"{tag}_out", f"{tag}_s"], [f"{tag}_m"]),
            helper.make_node("Add", [f"{tag}_m", f"{tag}_t"], [f"{tag}_a"]),
        ])
        if not relu:
            return f"{tag}_a"
        nodes.append(helper.make_node("Relu", [f"{tag}_a"], [f"{tag}_r"]))
        return f"{tag}_r"

    for b in range(blocks):
        h = conv_bn(x, f"b{b}a", relu=True)
        h = conv_bn(h, f"b{b}b", relu=False)
        nodes.append(helper.make_node("Add", [h, x], [f"b{b}_sum"]))
        nodes.append(helper.make_node("Relu", [f"b{b}_sum"], [f"b{b}_out"]))
        x = f"b{b}_out"
    return make_model(nodes, {"x": [1, hw, hw, c]}, {x: [1, hw, hw, c]}, inits)


def test_nhwc_resnet_keeps_only_boundary_transposes() -> None:
    before, after, counts = canonicalized(nhwc_resnet(3), raw=True)
    assert op_counts(before)["Transpose"] == 12
    ops = op_counts(after)
    assert ops["Transpose"] <= 2, ops
    assert ops["Conv"] == 6 and "Mul" not in ops, ops
    # one Add per residual; every BatchNorm Add went into a Conv bias
    assert ops["Add"] == 3, ops
    assert counts["fold_affine_into_linear"] == 12
    graph = after.graph
    assert graph.inputs[0].uses()[0][0].op_type == "Transpose"
    assert graph.outputs[0].producer().op_type == "Transpose"


def nhwc_se_hardswish(c: int = 4, hw: int = 6, seed: int = 1) -> onnx.ModelProto:
    """A MobileNetV3-style NHWC block as tf2onnx writes it: Conv (Transpose-wrapped), BatchNorm
    Mul/Add, hard-swish x * relu6(x + 3) / 6, then squeeze-excite: ReduceMean over H, W, two
    1x1 Convs (Transpose-wrapped), HardSigmoid, and the channel scale Mul broadcast over H, W."""
    gen = rng(seed)
    inits = {
        "w": (gen.standard_normal((c, c, 3, 3)) * 0.3).astype(np.float32),
        "s": gen.uniform(0.5, 1.5, c).astype(np.float32),
        "t": (gen.standard_normal(c) * 0.1).astype(np.float32),
        "three": np.array(3, np.float32), "six": np.array(6, np.float32),
        "zero": np.array(0, np.float32),
        "w1": (gen.standard_normal((2, c, 1, 1)) * 0.5).astype(np.float32),
        "w2": (gen.standard_normal((c, 2, 1, 1)) * 0.5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Transpose", ["x"], ["xi"], perm=TO_NCHW),
        helper.make_node("Conv", ["xi", "w"], ["c"], pads=[1] * 4),
        helper.make_node("Transpose", ["c"], ["co"], perm=TO_NHWC),
        helper.make_node("Mul", ["co", "s"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["a"]),
        helper.make_node("Add", ["a", "three"], ["a3"]),
        helper.make_node("Clip", ["a3", "zero", "six"], ["r6"]),
        helper.make_node("Mul", ["a", "r6"], ["hs0"]),
        helper.make_node("Div", ["hs0", "six"], ["hs"]),
        helper.make_node("ReduceMean", ["hs"], ["pool"], axes=[1, 2], keepdims=1),
        helper.make_node("Transpose", ["pool"], ["pi"], perm=TO_NCHW),
        helper.make_node("Conv", ["pi", "w1"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["s1r"]),
        helper.make_node("Conv", ["s1r", "w2"], ["s2"]),
        helper.make_node("Transpose", ["s2"], ["so"], perm=TO_NHWC),
        helper.make_node("HardSigmoid", ["so"], ["gate"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["hs", "gate"], ["y"]),
    ]
    return make_model(nodes, {"x": [1, hw, hw, c]}, {"y": [1, hw, hw, c]}, inits)


def test_nhwc_squeeze_excite_block() -> None:
    _, after, counts = canonicalized(nhwc_se_hardswish())
    ops = op_counts(after)
    assert ops["Transpose"] == 2, ops  # the input's and the output's
    assert "Add" not in ops and ops["Mul"] == 1, ops  # BatchNorm folded; only the SE scale left
    assert ops["HardSwish"] == 1 and ops["HardSigmoid"] == 1, ops
