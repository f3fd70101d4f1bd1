"""A small model with silero VAD's structure (no copy of it): an int64 graph input ``sr``, an If on
``Equal(sr, 16000)`` whose branches are STFT-like Conv front ends of different shapes (the 8 kHz
one carries a window sized for 8 kHz frames, so with the audio bound at a 16 kHz length onnx shape
inference fails inside it, as it does in silero's), each ending in Ifs nested in Ifs whose
conditions are shape arithmetic (Shape -> Gather -> Equal, Size -> Equal -> Not -> Cast, as
torch's export of squeeze and LSTM writes them in silero v6), an LSTM over the frames with its
state h, c as graph inputs and outputs, and a Conv/Sigmoid head."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper


def _front_end(name: str, kernel: int, stride: int, hidden: int, window: int | None,
               rng: np.random.Generator, nested: bool) -> onnx.GraphProto:
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
        helper.make_node("Relu", [f"{name}_e"], [f"{name}_r"]),
    ]
    if nested:
        more, more_inits = _shape_switches(name, f"{name}_r", f"{name}_out")
        nodes += more
        inits += more_inits
    else:
        nodes.append(helper.make_node("Identity", [f"{name}_r"], [f"{name}_out"]))
    out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)
    return helper.make_graph(nodes, name, [], [out], inits)


def _if(name: str, cond: str, out: str, then: list, then_out: str, other: list,
        other_out: str) -> onnx.NodeProto:
    def graph(nodes: list, result: str, which: str) -> onnx.GraphProto:
        value = helper.make_tensor_value_info(result, TensorProto.FLOAT, None)
        return helper.make_graph(nodes, f"{name}_{which}", [], [value])

    return helper.make_node("If", [cond], [out], name=name, then_branch=graph(then, then_out, "then"),
                            else_branch=graph(other, other_out, "else"))


def _shape_switches(name: str, feat: str, out: str) -> tuple[list, list]:
    """What torch's export writes around squeeze and the LSTM (silero's decoder): Ifs whose
    conditions are shape arithmetic, each with branches of different output shapes, nested:
    ``Shape -> Gather -> Equal(1)`` squeezes the batch axis or not; inside an If on
    ``Cast(Squeeze(Gather(Shape(h), 1)))`` (the state's batch), one on ``Size(Shape) -> Equal(3)
    -> Not -> Cast`` puts the axis back. With the shapes bound every condition is a constant:
    the frames come out [1, hidden, T] as they went in."""
    p = f"{name}_sw"

    def const(suffix: str, arr: np.ndarray) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(arr, f"{p}_{suffix}")

    inits = [const("zero", np.array(0, np.int64)), const("one", np.array(1, np.int64)),
             const("three", np.array(3, np.int64)), const("axis0", np.array([0], np.int64)),
             const("idx1", np.array([1], np.int64))]
    squeeze = _if(f"{p}/squeeze_if", f"{p}_is1", f"{p}_sq",
                  [helper.make_node("Squeeze", [feat, f"{p}_axis0"], [f"{p}_sq_t"])], f"{p}_sq_t",
                  [helper.make_node("Identity", [feat], [f"{p}_sq_e"])], f"{p}_sq_e")
    rank = _if(f"{p}/rank_if", f"{p}_not3", f"{p}_rk",
               [helper.make_node("Unsqueeze", [f"{p}_sq", f"{p}_axis0"], [f"{p}_rk_t"])],
               f"{p}_rk_t", [helper.make_node("Identity", [f"{p}_sq"], [f"{p}_rk_e"])],
               f"{p}_rk_e")
    inner = [helper.make_node("Shape", [f"{p}_sq"], [f"{p}_shp2"]),
             helper.make_node("Size", [f"{p}_shp2"], [f"{p}_rank"]),
             helper.make_node("Equal", [f"{p}_rank", f"{p}_three"], [f"{p}_eq3"]),
             helper.make_node("Not", [f"{p}_eq3"], [f"{p}_ne3"]),
             helper.make_node("Cast", [f"{p}_ne3"], [f"{p}_not3"], to=TensorProto.BOOL), rank]
    state = _if(f"{p}/state_if", f"{p}_has_batch", out, inner, f"{p}_rk",
                [helper.make_node("Identity", [f"{p}_sq"], [f"{p}_st_e"])], f"{p}_st_e")
    nodes = [helper.make_node("Shape", [feat], [f"{p}_shp"]),
             helper.make_node("Gather", [f"{p}_shp", f"{p}_zero"], [f"{p}_n"]),
             helper.make_node("Equal", [f"{p}_n", f"{p}_one"], [f"{p}_is1"]), squeeze,
             helper.make_node("Shape", ["h"], [f"{p}_hshp"]),
             helper.make_node("Gather", [f"{p}_hshp", f"{p}_idx1"], [f"{p}_hb"]),
             helper.make_node("Squeeze", [f"{p}_hb"], [f"{p}_hb1"]),
             helper.make_node("Cast", [f"{p}_hb1"], [f"{p}_has_batch"], to=TensorProto.BOOL),
             state]
    return nodes, inits


def silero_like(hidden: int = 8, samples_8k: int | None = 128, audio: list | None = None,
                conv_8k: tuple[int, int] = (16, 8), seed: int = 0,
                nested: bool = True) -> onnx.ModelProto:
    """``samples_8k``: the 8 kHz branch's window length (None: no window, it infers at any
    length); ``conv_8k``: its conv's (kernel, stride) (the 16 kHz one's is (32, 16): equal, both
    branches give the same shapes). ``audio``: the declared dims of ``x`` (default
    [1, 'samples']). ``nested``: each branch ends in silero's nested shape-conditioned Ifs
    (``_shape_switches``)."""
    rng = np.random.default_rng(seed)

    def init(name: str, arr: np.ndarray) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(arr, name)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    then16 = _front_end("stft16k", 32, 16, hidden, None, rng, nested)
    else8 = _front_end("stft8k", *conv_8k, hidden, samples_8k, rng, nested)
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
