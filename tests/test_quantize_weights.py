"""Weights and biases of `opfuse quantize` where int8 and int32 run out of range: a channel whose
weights all but vanish (1e-31, as BN folding leaves a dead channel of vww_96_float.tflite) beside a
live bias keeps its bias, its weight scale raised as TFLite's converter does, instead of an int32
bias that overflowed (a float32 inf cast to int32)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _dead_channel_model() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.2
    w[1] = 6e-31  # a dead channel: its output is its bias
    b = np.array([0.1, 0.5, -0.2, 0.3], np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "dead", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 6, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_dead_channel_keeps_its_bias(tmp_path) -> None:
    import onnxruntime as ort

    from opfuse import api
    from opfuse.quantize.data import Samples

    src = tmp_path / "dead.onnx"
    onnx.save(_dead_channel_model(), src)
    rng = np.random.default_rng(0)
    samples = Samples("t", {"x": rng.standard_normal((8, 1, 3, 6, 6)).astype(np.float32)}, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow, no invalid cast
        done = api.quantize(api.compile(str(src), "x86-host"), samples)
    inits = {i.name: numpy_helper.to_array(i) for i in done.proto.graph.initializer}
    bias_q = next(a for a in inits.values() if a.dtype == np.int32)
    dq = next(n for n in done.proto.graph.node if n.op_type == "DequantizeLinear"
              and inits.get(n.input[0]) is bias_q)
    step = inits[dq.input[1]].astype(np.float64)
    bias = bias_q.astype(np.float64) * step
    assert np.all(np.abs(bias - [0.1, 0.5, -0.2, 0.3]) <= 0.5 * step * (1 + 1e-6))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    q = ort.InferenceSession(done.proto.SerializeToString(), opts,
                             providers=["CPUExecutionProvider"])
    y = q.run(None, {"x": samples.arrays["x"][0]})[0]
    scale = float(next(inits[n.input[1]] for n in done.proto.graph.node
                       if n.op_type == "QuantizeLinear" and n.input[0].startswith("y")))
    assert np.abs(y[0, 1] - 0.5).max() <= scale  # the dead channel is its bias, within a step
