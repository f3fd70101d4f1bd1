"""Constant folding of what became constant after the rewrites."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.helpers.passes import canonicalized, fired, make_model, op_counts, rng


def test_weight_built_behind_an_identity_is_folded_then_bn_fuses() -> None:
    # W = Transpose(Identity(W0)): only after the Identity goes is the Transpose all-constant;
    # folded, W is an initializer and the BN folds into the Conv.
    g = rng()
    inits = {
        "w0": g.standard_normal((2, 3, 1, 1)).astype(np.float32),
        "s": g.uniform(0.5, 1.5, 3).astype(np.float32),
        "t": g.standard_normal(3).astype(np.float32),
        "m": g.standard_normal(3).astype(np.float32),
        "v": g.uniform(0.5, 1.5, 3).astype(np.float32),
    }
    nodes = [
        helper.make_node("Identity", ["w0"], ["wi"]),
        helper.make_node("Transpose", ["wi"], ["w"], perm=[1, 0, 2, 3]),
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["y"]),
    ]
    proto = make_model(nodes, {"x": [1, 2, 4, 4]}, {"y": None}, inits)
    _, after, counts = canonicalized(proto, raw=True)
    assert op_counts(after) == {"Conv": 1}
    assert counts["fold_constants"] >= 1
    assert fired(counts).keys() >= {"remove_identity", "fold_constants", "fuse_bn_into_conv"}
