"""Small ONNX LSTM / GRU models with every option the C kernels take (tests/test_c_recurrent.py,
benchmarks/recurrent.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper


def recurrent_model(op: str = "LSTM", steps: int = 5, batch: int = 2, size: int = 3,
                    hidden: int = 4, direction: str = "forward", layout: int = 0,
                    outputs: tuple[str, ...] = ("y", "yh", "yc"), peepholes: bool = False,
                    lens: list[int] | None = None, states: bool = True, seed: int = 0,
                    **attrs: object) -> onnx.ModelProto:
    """One LSTM/GRU node with random weights (W, R, B constant), x and the initial states as graph
    inputs; ``outputs`` names which of Y, Y_h, Y_c the graph returns."""
    gates = 4 if op == "LSTM" else 3
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(seed)

    def const(name: str, *shape: int, scale: float = 0.5) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [const("W", dirs, gates * hidden, size), const("R", dirs, gates * hidden, hidden),
             const("B", dirs, 2 * gates * hidden)]
    xs = [steps, batch, size] if layout == 0 else [batch, steps, size]
    hs = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    ys = [steps, dirs, batch, hidden] if layout == 0 else [batch, steps, dirs, hidden]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)]
    names = ["x", "W", "R", "B", "", "", ""]
    if lens is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(lens, np.int32), "lens"))
        names[4] = "lens"
    for i, state in enumerate(("h0", "c0") if op == "LSTM" else ("h0",)):
        if states:
            inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT, hs))
            names[5 + i] = state
    if peepholes:
        inits.append(const("P", dirs, 3 * hidden))
        names.append("P")
    names = names if peepholes else names[: max(i for i, n in enumerate(names) if n) + 1]
    outs = ["y", "yh", "yc"] if op == "LSTM" else ["y", "yh"]
    node_outs = [o if o in outputs else "" for o in outs]
    while node_outs and not node_outs[-1]:
        node_outs.pop()
    shapes = {"y": ys, "yh": hs, "yc": hs}
    graph_outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o])
                  for o in outs if o in outputs]
    node = helper.make_node(op, names, node_outs, hidden_size=hidden, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    graph = helper.make_graph([node], "recurrent", inputs, graph_outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
