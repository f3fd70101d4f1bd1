"""Helpers for pass tests: build small graphs, import them, run them in onnxruntime, compare."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx_ir.passes.common import NameFixPass

from opfuse.frontends import import_proto
from opfuse.ir import infer_shapes, require_static, verify
from opfuse.passes import canonicalize

OPSET = 17
_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def const(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, Sequence[int]],
    outputs: dict[str, Sequence[int] | None],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = OPSET,
) -> onnx.ModelProto:
    """A float32 model; output shapes may be None (shape inference fills them)."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
        [const(n, a) for n, a in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def import_model(proto: onnx.ModelProto, raw: bool = False) -> ir.Model:
    """Through the frontend, or ``raw``: only parsed, shapes inferred and nodes named (the
    frontend would already fold away Identity/Dropout and constant subgraphs)."""
    if not raw:
        return import_proto(proto, "<test>")
    model = ir.from_proto(proto)
    infer_shapes(model)
    NameFixPass()(model)
    return model


def op_counts(model: ir.Model) -> Counter[str]:
    return Counter(node.op_type for node in model.graph)


def session(model: ir.Model | onnx.ModelProto) -> ort.InferenceSession:
    proto = ir.to_proto(model) if isinstance(model, ir.Model) else model
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(
        proto.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"]
    )


def random_feeds(model: ir.Model, seed: int = 0) -> dict[str, np.ndarray]:
    gen = rng(seed)
    feeds = {}
    for value in model.graph.inputs:
        shape = tuple(int(d) for d in value.shape)
        dtype = value.dtype.numpy()
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = gen.standard_normal(shape).astype(dtype)
        else:
            feeds[value.name] = gen.integers(0, 4, shape).astype(dtype)
    return feeds


def run(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def assert_same_outputs(
    before: ir.Model, after: ir.Model, seed: int = 0, rel: float = 1e-4
) -> None:
    """Same output names and values: max abs error <= rel * max|output| (at least rel * 1e-2)."""
    feeds = random_feeds(before, seed)
    want, got = run(before, feeds), run(after, feeds)
    assert list(want) == list(got), "graph output names changed"
    for name, expected in want.items():
        actual = got[name]
        assert actual.shape == expected.shape, name
        finite = np.isfinite(expected)
        # inf/nan (a Div by zero kept on purpose) must come out the same
        np.testing.assert_array_equal(actual[~finite], expected[~finite])
        expected, actual = expected[finite], actual[finite]
        scale = max(float(np.max(np.abs(expected))) if expected.size else 0.0, 1e-2)
        err = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
        assert err <= rel * scale, f"{name}: max abs error {err} > {rel} * {scale}"


def emitted_matches(proto: onnx.ModelProto, op: str) -> onnx.ModelProto:
    """Canonicalize ``proto`` (it must yield exactly one ``op``), write portable ONNX, check it and
    run it beside the original in onnxruntime; the written ONNX."""
    from opfuse.backends.onnx import emit_onnx
    from opfuse.fusion import trivial_partition

    before = import_model(proto)
    after = before.clone()
    canonicalize(after)
    assert op_counts(after)[op] == 1
    out = emit_onnx(after, trivial_partition(after))
    onnx.checker.check_model(out, full_check=True)
    feeds = random_feeds(before)
    want, got = run(before, feeds), run(out, feeds)
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)
    return out


def canonicalized(
    proto: onnx.ModelProto, seed: int = 0, raw: bool = False
) -> tuple[ir.Model, ir.Model, dict[str, int]]:
    """Import, canonicalize a clone; check it is valid ONNX, keeps static shapes after a fresh
    shape inference, has unique node names and computes the same outputs."""
    before = import_model(proto, raw)
    after = before.clone()
    counts = canonicalize(after)
    onnx.checker.check_model(ir.to_proto(after), full_check=True)
    check = after.clone()
    infer_shapes(check)
    require_static(check, "test")
    verify(check, "canonicalize")
    assert_same_outputs(before, after, seed)
    return before, after, counts


def fired(counts: dict[str, int]) -> dict[str, int]:
    return {name: n for name, n in counts.items() if n}


def conv_bn_chain(blocks: int, channels: int = 4, hw: int = 4, seed: int = 0) -> onnx.ModelProto:
    """``blocks`` x (Conv 3x3 -> BatchNormalization -> Relu): 3 * blocks nodes."""
    gen = rng(seed)
    nodes, inits = [], {}
    prev = "x"
    for i in range(blocks):
        inits[f"w{i}"] = gen.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.2
        inits[f"b{i}"] = gen.standard_normal(channels).astype(np.float32)
        inits[f"g{i}"] = gen.uniform(0.5, 1.5, channels).astype(np.float32)
        inits[f"be{i}"] = gen.standard_normal(channels).astype(np.float32)
        inits[f"m{i}"] = gen.standard_normal(channels).astype(np.float32)
        inits[f"v{i}"] = gen.uniform(0.5, 2.0, channels).astype(np.float32)
        nodes += [
            helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
            helper.make_node(
                "BatchNormalization",
                [f"c{i}", f"g{i}", f"be{i}", f"m{i}", f"v{i}"],
                [f"n{i}"],
            ),
            helper.make_node("Relu", [f"n{i}"], [f"r{i}"]),
        ]
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    shape = [1, channels, hw, hw]
    return make_model(nodes, {"x": shape}, {"y": shape}, inits)


def bn_params(c: int, prefix: str = "bn", seed: int = 1) -> dict[str, np.ndarray]:
    g = rng(seed)
    return {
        f"{prefix}_g": g.uniform(0.5, 1.5, c).astype(np.float32),
        f"{prefix}_b": g.standard_normal(c).astype(np.float32),
        f"{prefix}_m": g.standard_normal(c).astype(np.float32),
        f"{prefix}_v": g.uniform(0.5, 2.0, c).astype(np.float32),
    }


def bn(x: str, y: str, prefix: str = "bn", **kw) -> helper.NodeProto:
    names = [f"{prefix}_{s}" for s in "gbmv"]
    return helper.make_node("BatchNormalization", [x, *names], [y], epsilon=1e-3, **kw)
