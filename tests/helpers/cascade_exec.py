"""A numpy executor that runs a cascaded kernel band by band through ring buffers of exactly the
partition's sizes, for tests: reading a row that is not in its ring (evicted or never computed)
raises, so a ring that is too small or a schedule that recomputes shows up as an error, and the
result is compared with onnxruntime on the whole model.

Only what the test chains use: Conv (groups, strides, dilations, pads), MaxPool / AveragePool
(no padding), Relu, Clip, Add, Mul.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opfuse.fusion.rings import Window, band_schedule
from opfuse.fusion.stages import WINDOWED, chain_input, rows_of, window_of
from opfuse.schedule import Kernel


class Ring:
    """``rows`` slots of (C, W) rows; row r lives in slot r % rows, tagged with r."""

    def __init__(self, rows: int, shape: tuple[int, int]) -> None:
        self.data = np.zeros((rows, *shape), np.float32)
        self.tag = np.full(rows, -1)

    def put(self, first: int, block: np.ndarray) -> None:
        for i, row in enumerate(block):
            slot = (first + i) % len(self.tag)
            self.data[slot], self.tag[slot] = row, first + i

    def get(self, row: int) -> np.ndarray:
        slot = row % len(self.tag)
        if self.tag[slot] != row:
            raise AssertionError(f"row {row} is not in the ring (slot holds {self.tag[slot]})")
        return self.data[slot]


class Whole:
    def __init__(self, array: np.ndarray) -> None:  # (C, H, W)
        self.array = array

    def put(self, first: int, block: np.ndarray) -> None:
        self.array[:, first : first + len(block)] = np.moveaxis(block, 0, 1)

    def get(self, row: int) -> np.ndarray:
        return self.array[:, row]


def _ints(node: ir.Node, name: str, default: list[int]) -> list[int]:
    attr = node.attributes.get(name)
    return list(attr.as_ints()) if attr is not None else default


def _slab(src, height: int, w: Window, first: int, last: int, channels: int, width: int, fill):
    lo = first * w.stride - w.pad_top
    hi = last * w.stride - w.pad_top + w.extent - 1
    rows = [src.get(r) if 0 <= r < height else np.full((channels, width), fill, np.float32)
            for r in range(lo, hi + 1)]  # fmt: skip
    return np.stack(rows, axis=1)  # (C, rows, W)


def _windowed(node: ir.Node, slab: np.ndarray, consts: dict, count: int) -> np.ndarray:
    w = window_of(node)
    kw = _ints(node, "kernel_shape", [1, 1])[1] if node.op_type != "Conv" else None
    pads = _ints(node, "pads", [0, 0, 0, 0])
    sw = _ints(node, "strides", [1, 1])[1]
    dw = _ints(node, "dilations", [1, 1])[1]
    fill = 0.0 if node.op_type != "MaxPool" else -np.inf
    c, _, width = slab.shape
    padded = np.full((c, slab.shape[1], width + pads[1] + pads[3]), fill, np.float32)
    padded[:, :, pads[1] : pads[1] + width] = slab
    if node.op_type == "Conv":
        weight = consts[node.inputs[1].name]
        kw = weight.shape[3]
    out_w = (padded.shape[2] - dw * (kw - 1) - 1) // sw + 1
    # patches[c, r, x, th, tw]
    patches = np.stack([
        np.stack([padded[:, r * w.stride + th * w.dilation, tw * dw : tw * dw + sw * (out_w - 1) + 1 : sw]
                  for th in range(w.kernel) for tw in range(kw)], axis=-1)
        for r in range(count)], axis=1)  # fmt: skip
    if node.op_type == "MaxPool":
        return patches.max(axis=-1)
    if node.op_type == "AveragePool":
        return patches.mean(axis=-1)
    attr = node.attributes.get("group")
    group = attr.as_int() if attr is not None else 1
    cout = weight.shape[0]
    cin_g = c // group
    out = np.empty((cout, count, out_w), np.float32)
    per_g = cout // group
    for g in range(group):
        p = patches[g * cin_g : (g + 1) * cin_g]  # (cin_g, r, x, k)
        wg = weight[g * per_g : (g + 1) * per_g].reshape(per_g, cin_g, -1)
        out[g * per_g : (g + 1) * per_g] = np.einsum("crxk,ock->orx", p, wg)
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        out += consts[node.inputs[2].name][:, None, None]
    return out


def _elementwise(node: ir.Node, band: dict, consts: dict, full: dict, first: int, last: int):
    def operand(value: ir.Value) -> np.ndarray:
        if value.name in band:
            return band[value.name]
        if value.name in consts:
            arr = consts[value.name]
            return arr.reshape(arr.shape[1:]) if arr.ndim == 4 else arr
        return full[value.name][0][:, first : last + 1]  # a residual: rows of a whole tensor

    args = [operand(v) if v is not None else None for v in node.inputs]
    if node.op_type == "Relu":
        return np.maximum(args[0], 0)
    if node.op_type == "Clip":
        lo = args[1] if len(args) > 1 and args[1] is not None else -np.inf
        hi = args[2] if len(args) > 2 and args[2] is not None else np.inf
        return np.clip(args[0], lo, hi)
    if node.op_type == "Add":
        return args[0] + args[1]
    if node.op_type == "Mul":
        return args[0] * args[1]
    raise NotImplementedError(node.op_type)


def run_cascade(kernel: Kernel, model: ir.Model, env: dict[str, np.ndarray]) -> None:
    """Run ``kernel`` (a cascade) on ``env`` (value name -> NCHW array), adding its outputs."""
    nodes = {n.name: n for n in model.graph}
    consts = {name: v.const_value.numpy() for name, v in model.graph.initializers.items()
              if v.const_value is not None}  # fmt: skip
    members = [[nodes[n] for n in m.nodes] for m in kernel.members]
    windows = [window_of(ms[0]) if ms[0].op_type in WINDOWED else Window() for ms in members]
    first_in = chain_input(kernel.members[0], nodes)
    values = [first_in] + [ms[-1].outputs[0] for ms in members]
    heights = [rows_of(v) for v in values]
    rings = {r.value: r.rows for r in kernel.ring_buffers}
    stores: list = [Whole(env[first_in.name][0])]
    for v in values[1:-1]:
        shape = tuple(v.shape)
        stores.append(Ring(rings[v.name], (shape[1], shape[3])))
    out_shape = tuple(values[-1].shape)
    result = np.zeros(out_shape, np.float32)
    stores.append(Whole(result[0]))
    full = {k: v for k, v in env.items()}
    for stage, a, b in band_schedule(windows, heights, kernel.band_rows):
        ms = members[stage]
        src = stores[stage]
        chain = values[stage]
        c, width = chain.shape[1], chain.shape[3]
        band: dict[str, np.ndarray] = {}
        for node in ms:
            if node.op_type in WINDOWED:
                if node is not ms[0]:
                    raise NotImplementedError("two windows in one member")
                fill = -np.inf if node.op_type == "MaxPool" else 0.0
                slab = _slab(src, heights[stage], windows[stage], a, b, c, width, fill)
                band[node.outputs[0].name] = _windowed(node, slab, consts, b - a + 1)
            else:
                if node is ms[0]:
                    band[chain.name] = np.stack([src.get(r) for r in range(a, b + 1)], axis=1)
                band[node.outputs[0].name] = _elementwise(node, band, consts, full, a, b)
        block = band[ms[-1].outputs[0].name]
        stores[stage + 1].put(a, np.moveaxis(block, 1, 0))
    env[values[-1].name] = result


def every_value(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every node output of ``model`` computed by onnxruntime, layer by layer."""
    import onnx
    import onnxruntime as ort

    proto = ir.serde.serialize_model(model)
    known = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        for name in node.output:
            if name and name not in known:
                proto.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options, ["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True)) | dict(feeds)
