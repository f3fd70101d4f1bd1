"""A small model with silero VAD's structure (no copy of it): an int64 graph input ``sr``, an If on
``Equal(sr, 16000)`` whose branches are STFT-like Conv front ends of different shapes (the 8 kHz
one carries a window sized for 8 kHz frames, so with the audio bound at a 16 kHz length onnx shape
inference fails inside it, as it does in silero's), an LSTM over the frames with its state h, c as
graph inputs and outputs, and a Conv/Sigmoid head."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper


def _front_end(name: str, kernel: int, stride: int, hidden: int, window: int | None,
               rng: np.random.Generator) -> onnx.GraphProto:
    def init(suffix: str, arr: np.ndarray) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(arr, f"{name}_{suffix}")

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    frames = f"{name}_a"
    nodes = [helper.make_node("Reshape", ["x", f"{name}_shape"], [frames])]
    inits = [init("shape", np.array([1, 1, -1], np.int64)), init("w", rand(12, 1, kernel)),
             init("w2", rand(hidden, 12, 3)), init("b2", rand(hidden))]
    if window is not None:  # a window table of one frame length
        nodes.append(helper.make_node("Mul", [frames, f"{name}_win"], [f"{name}_aw"]))
        inits.append(init("win", rand(1, 1, window)))
        frames = f"{name}_aw"
    nodes += [
        helper.make_node("Conv", [frames, f"{name}_w"], [f"{name}_s"], strides=[stride]),
        helper.make_node("Mul", [f"{name}_s", f"{name}_s"], [f"{name}_p"]),  # power
        helper.make_node("Conv", [f"{name}_p", f"{name}_w2", f"{name}_b2"], [f"{name}_e"],
                         kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Relu", [f"{name}_e"], [f"{name}_out"]),
    ]
    out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)
    return helper.make_graph(nodes, name, [], [out], inits)


def silero_like(hidden: int = 8, samples_8k: int | None = 128, audio: list | None = None,
                conv_8k: tuple[int, int] = (16, 8), seed: int = 0) -> onnx.ModelProto:
    """``samples_8k``: the 8 kHz branch's window length (None: no window, it infers at any
    length); ``conv_8k``: its conv's (kernel, stride) (the 16 kHz one's is (32, 16): equal, both
    branches give the same shapes). ``audio``: the declared dims of ``x`` (default
    [1, 'samples'])."""
    rng = np.random.default_rng(seed)

    def init(name: str, arr: np.ndarray) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(arr, name)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    then16 = _front_end("stft16k", 32, 16, hidden, None, rng)
    else8 = _front_end("stft8k", *conv_8k, hidden, samples_8k, rng)
    nodes = [
        helper.make_node("Constant", [], ["k16"], value=helper.make_tensor("k", TensorProto.INT64,
                                                                           [], [16000])),
        helper.make_node("Equal", ["sr", "k16"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["feat"], name="rate_switch", then_branch=then16,
                         else_branch=else8),
        helper.make_node("Transpose", ["feat"], ["seq"], perm=[2, 0, 1]),
        helper.make_node("LSTM", ["seq", "W", "R", "B", "", "h", "c"], ["y", "hn", "cn"],
                         hidden_size=hidden),
        helper.make_node("Squeeze", ["y", "axis1"], ["y3"]),
        helper.make_node("Transpose", ["y3"], ["ych"], perm=[1, 2, 0]),
        helper.make_node("Relu", ["ych"], ["yr"]),
        helper.make_node("Conv", ["yr", "head_w", "head_b"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["frame_prob"]),
        helper.make_node("ReduceMean", ["frame_prob"], ["prob"], axes=[2], keepdims=0),
    ]
    inits = [init("W", rand(1, 4 * hidden, hidden)), init("R", rand(1, 4 * hidden, hidden)),
             init("B", rand(1, 8 * hidden)), init("axis1", np.array([1], np.int64)),
             init("head_w", rand(1, hidden, 1)), init("head_b", rand(1))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, audio or [1, "samples"]),
              helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 1, hidden]),
              helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 1, hidden]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, [])]
    outputs = [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1]),
               helper.make_tensor_value_info("hn", TensorProto.FLOAT, [1, 1, hidden]),
               helper.make_tensor_value_info("cn", TensorProto.FLOAT, [1, 1, hidden])]
    graph = helper.make_graph(nodes, "silero_like", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
