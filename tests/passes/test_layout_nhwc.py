"""Must-show of layout canonicalization: a tf2onnx-style NHWC network keeps only its boundary
Transposes and every NHWC BatchNorm (Mul/Add between Transpose pairs) folds into its Conv."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.passes._passes_util import canonicalized, make_model, op_counts, rng

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
