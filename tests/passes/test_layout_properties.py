"""Property: layout canonicalization preserves outputs (onnxruntime on the original model) and
never adds a Transpose, on random chains that switch between NCHW and NHWC (Conv wrapped in
Transposes, per-channel Mul/Add, activations, Pad, reductions, Concat, residual Adds)."""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from tests.helpers.passes import canonicalized, make_model, op_counts

C = 3
STEPS = st.lists(
    st.sampled_from(
        ["conv", "affine", "act", "switch", "pad", "reduce", "concat", "save", "residual"]
    ),
    min_size=1,
    max_size=12,
)


def chain(steps: list[str], seed: int) -> onnx.ModelProto:
    gen = np.random.default_rng(seed)
    nodes, inits = [], {}
    names = iter(f"v{i}" for i in range(10_000))
    x, nhwc = "x", False
    shape = [1, C, 4, 5]  # of x in its current layout
    saved: tuple[str, list[int], bool] | None = None

    def node(op: str, inputs: list[str], **attrs) -> str:
        out = next(names)
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def const(array: np.ndarray) -> str:
        name = next(names)
        inits[name] = array
        return name

    def transpose(v: str, to_nhwc: bool) -> str:
        return node("Transpose", [v], perm=[0, 2, 3, 1] if to_nhwc else [0, 3, 1, 2])

    x = node("Relu", [x])  # the output is never the input itself
    for step in steps:
        channel_axis = 3 if nhwc else 1
        if step == "conv":
            w = const((gen.standard_normal((C, shape[channel_axis], 3, 3)) * 0.3).astype(np.float32))
            v = transpose(x, False) if nhwc else x
            v = node("Conv", [v, w], pads=[1, 1, 1, 1])
            x = transpose(v, True) if nhwc else v
            shape[channel_axis] = C
        elif step == "affine":
            c = shape[channel_axis]
            vec = gen.uniform(0.5, 1.5, c).astype(np.float32)
            x = node("Mul", [x, const(vec if nhwc else vec.reshape(c, 1, 1))])
            x = node("Add", [const(vec[::-1].copy() if nhwc else vec.reshape(c, 1, 1)), x])
        elif step == "act":
            x = node(["Relu", "Sigmoid", "Tanh"][len(nodes) % 3], [x])
        elif step == "switch":
            x, nhwc = transpose(x, not nhwc), not nhwc
            shape = [shape[i] for i in ([0, 2, 3, 1] if nhwc else [0, 3, 1, 2])]
        elif step == "pad":
            pads = gen.integers(0, 2, 8)
            pads[[0, 4]] = 0
            x = node("Pad", [x, const(pads.astype(np.int64))])
            shape = [d + int(pads[i] + pads[i + 4]) for i, d in enumerate(shape)]
        elif step == "reduce":
            spatial = [1, 2] if nhwc else [2, 3]
            pooled = node("ReduceMean", [x], axes=spatial, keepdims=1)
            x = node("Mul", [x, node("Sigmoid", [pooled])])
        elif step == "concat":
            x = node("Concat", [x, x], axis=-1)
            shape[-1] *= 2
        elif step == "save":
            saved = (x, list(shape), nhwc)
        elif step == "residual" and saved is not None and saved[1:] == (shape, nhwc):
            x = node("Add", [x, saved[0]])
    return make_model(nodes, {"x": [1, C, 4, 5]}, {x: None}, inits)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS, st.integers(0, 2**16))
def test_layout_canonicalization_preserves_outputs(steps: list[str], seed: int) -> None:
    before, after, _ = canonicalized(chain(steps, seed), seed)
    assert op_counts(after)["Transpose"] <= op_counts(before)["Transpose"]
