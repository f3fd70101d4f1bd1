"""The int8 probe of ``opfuse calibrate``: opfuse's own generated int8 C, timed per kernel, fitted to
the work model of ``opfuse.cost.cwork`` (docs/architecture.md, the cost row).

Float ONNX models of ``CHUNK`` probe layers each (so that, as in an MCU model, their weights and
arena stay in L2 across invokes: one model of all of them made its small Gemms 3x slower, reading
their weights from L3) hold every probe layer as its own branch (its own graph input and output):
dense convs, pointwise and depthwise convs, Gemms, pools, a residual Add and global pools, at the
sizes of MCU CNNs (8-320 channels, 2x2-80x80 planes) and chosen to exercise each path of the C
templates (output-row loops, pointwise pixel tiles, channel lanes). onnxruntime's
``quantize_static`` turns it into int8 QDQ (per-channel weights, as TFLite's), opfuse compiles it
(for ``x86-host``: the probe layers stand alone, so fusion only folds a Relu into its conv) and
emits the C, and ``opfuse.measure.run.kernel_times`` times every kernel as it runs in the full invoke.

Per C template path the four costs of ``cwork`` are fitted to the measured times, non-negative,
minimising the relative error: seconds per MAC in whole vectors, per MAC of a scalar loop tail, per output element (requantize +
store) and per vector loop started. A
cost the fit drives negative is dropped (0) and the rest refitted. A view (a Reshape the memory
plan places on its input) measures the C call itself: its median is the dispatch overhead.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from opfuse.ops.groups import CONVERSIONS, POOLS

Shape = tuple[int, ...]
_C3 = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}


def conv_attrs(k: int, stride: int = 1, group: int = 1) -> dict:
    p = k // 2
    return {"kernel_shape": [k, k], "pads": [p] * 4, "strides": [stride] * 2, "group": group}


# (op, attrs, input shape, weight shape or None, after: "relu", "add" (a residual Add of a second
# input, fused into the conv's epilogue), "stem" (the input NHWC and transposed, as a TFLite
# model's, then a Relu) or ""). The comment says the C template path it runs.
CASES: tuple[tuple[str, dict, Shape, Shape | None, str], ...] = (
    ("Conv", conv_attrs(3, 2), (1, 3, 64, 64), (16, 3, 3, 3), "relu"),  # conv_rows
    ("Conv", conv_attrs(3, 2), (1, 3, 80, 80), (8, 3, 3, 3), "relu"),  # conv_rows
    ("Conv", conv_attrs(3), (1, 8, 40, 40), (16, 8, 3, 3), "relu"),  # conv_rows
    ("Conv", conv_attrs(3), (1, 24, 20, 20), (24, 24, 3, 3), "relu"),  # conv_rows
    # more conv_rows (4 layers fitted its 4 costs exactly, a MAC at 0 s): rows of 32 or more,
    # one input channel (x86's quad core), 3 channels, 16 -> 16 (ResNet-8's), 24 channels
    ("Conv", conv_attrs(3), (1, 16, 32, 32), (16, 16, 3, 3), "relu"),  # conv_rows
    ("Conv", conv_attrs(3), (1, 3, 32, 32), (16, 3, 3, 3), "relu"),  # conv_rows
    ("Conv", conv_attrs(3, 2), (1, 1, 96, 96), (8, 1, 3, 3), "relu"),  # conv_rows
    ("Conv", {**conv_attrs(3, 2), "pads": [0] * 4}, (1, 3, 81, 81), (16, 3, 3, 3), "relu"),
    ("Conv", conv_attrs(3), (1, 8, 48, 48), (24, 8, 3, 3), "relu"),  # conv_rows
    ("Conv", conv_attrs(3), (1, 32, 36, 36), (16, 32, 3, 3), "relu"),  # conv_rows
    # TFLite stems: an NHWC graph input read in place (Transpose + Conv, fusion/views.py)
    ("Conv", conv_attrs(3, 2), (1, 3, 96, 96), (8, 3, 3, 3), "stem"),  # conv_rows
    ("Conv", conv_attrs(3), (1, 3, 32, 32), (16, 3, 3, 3), "stem"),  # conv_rows
    ("Conv", {**conv_attrs(3, 2), "pads": [0] * 4}, (1, 3, 65, 65), (16, 3, 3, 3), "stem"),
    ("Conv", conv_attrs(3), (1, 16, 24, 24), (16, 16, 3, 3), "relu"),  # conv_lanes
    ("Conv", conv_attrs(3), (1, 32, 12, 12), (32, 32, 3, 3), "relu"),  # conv_lanes
    ("Conv", conv_attrs(3), (1, 48, 8, 8), (48, 48, 3, 3), ""),  # conv_lanes
    ("Conv", conv_attrs(3, 2), (1, 32, 16, 16), (64, 32, 3, 3), "relu"),  # conv_lanes
    ("Conv", {}, (1, 64, 7, 7), (128, 64, 1, 1), "relu"),  # conv_lanes
    ("Conv", {}, (1, 160, 4, 4), (64, 160, 1, 1), ""),  # conv_lanes
    ("Conv", {}, (1, 256, 2, 2), (128, 256, 1, 1), "relu"),  # conv_lanes
    ("Conv", {}, (1, 96, 5, 5), (192, 96, 1, 1), "relu"),  # conv_lanes
    ("Conv", {}, (1, 48, 3, 3), (320, 48, 1, 1), "relu"),  # conv_lanes
    ("Conv", {}, (1, 8, 40, 40), (24, 8, 1, 1), "relu"),  # pointwise
    ("Conv", {}, (1, 16, 20, 20), (48, 16, 1, 1), "relu"),  # pointwise
    ("Conv", {}, (1, 48, 20, 20), (16, 48, 1, 1), ""),  # pointwise
    ("Conv", {}, (1, 32, 14, 14), (64, 32, 1, 1), "relu"),  # pointwise
    ("Conv", {}, (1, 96, 10, 10), (32, 96, 1, 1), ""),  # pointwise
    ("Conv", {}, (1, 24, 9, 9), (72, 24, 1, 1), "relu"),  # pointwise
    ("Conv", {}, (1, 40, 8, 8), (120, 40, 1, 1), "relu"),  # pointwise
    ("Conv", {}, (1, 32, 11, 11), (48, 32, 1, 1), "relu"),  # pointwise, tiles 64 + 57
    ("Conv", {}, (1, 48, 15, 9), (32, 48, 1, 1), "relu"),  # pointwise, tiles 2 x 64 + 7
    ("Conv", {}, (1, 16, 7, 13), (64, 16, 1, 1), "relu"),  # pointwise, tiles 64 + 27
    ("Conv", {}, (1, 24, 16, 16), (40, 24, 1, 1), "add"),  # pointwise + epilogue
    ("Conv", {}, (1, 160, 6, 6), (32, 160, 1, 1), "add"),  # conv_lanes + epilogue
    ("Conv", conv_attrs(3), (1, 16, 16, 16), (16, 16, 3, 3), "add"),  # conv_lanes + epilogue
    ("Conv", conv_attrs(3, 1, 16), (1, 16, 48, 48), (16, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 2, 24), (1, 24, 40, 40), (24, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 1, 32), (1, 32, 30, 30), (32, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 1, 64), (1, 64, 14, 14), (64, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 2, 96), (1, 96, 14, 14), (96, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 1, 192), (1, 192, 4, 4), (192, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(5, 1, 48), (1, 48, 20, 20), (48, 1, 5, 5), "relu"),  # depthwise
    ("Conv", conv_attrs(7, 1, 96), (1, 96, 8, 8), (96, 1, 7, 7), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 1, 320), (1, 320, 2, 2), (320, 1, 3, 3), "relu"),  # depthwise
    # more depthwise (x86: vectors of 16 pixels, kernelplan/dw8.py): rows of 5 (kws' 25 x 5),
    # stride 2 by rows and flat, 5x5 and 7x7 stride 2 on small planes, a 3 x 3 plane
    ("Conv", conv_attrs(3, 1, 64), (1, 64, 25, 5), (64, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 2, 64), (1, 64, 12, 12), (64, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 2, 48), (1, 48, 40, 40), (48, 1, 3, 3), "relu"),  # depthwise
    ("Conv", conv_attrs(7, 2, 144), (1, 144, 10, 10), (144, 1, 7, 7), "relu"),  # depthwise
    ("Conv", conv_attrs(5, 2, 240), (1, 240, 5, 5), (240, 1, 5, 5), "relu"),  # depthwise
    ("Conv", conv_attrs(3, 1, 384), (1, 384, 3, 3), (384, 1, 3, 3), "relu"),  # depthwise
    ("Gemm", {"transB": 1}, (1, 256), (64, 256), "relu"),
    ("Gemm", {"transB": 1}, (1, 512), (10, 512), ""),
    ("Gemm", {"transB": 1}, (1, 64), (64, 64), "relu"),
    ("Gemm", {"transB": 1}, (1, 100), (30, 100), ""),
    ("Gemm", {"transB": 1}, (1, 1024), (128, 1024), "relu"),
    # more batch-1 GEMVs (x86/gemv.py) at the shared models' sizes: ad01's 640-128-8 autoencoder,
    # hello_world's 16 x 16, kws' classifier; and rows > 1 for the gemm path (the conv core)
    ("Gemm", {"transB": 1}, (1, 640), (128, 640), "relu"),
    ("Gemm", {"transB": 1}, (1, 128), (640, 128), ""),
    ("Gemm", {"transB": 1}, (1, 128), (8, 128), "relu"),
    ("Gemm", {"transB": 1}, (1, 16), (16, 16), "relu"),
    ("Gemm", {"transB": 1}, (1, 64), (12, 64), ""),
    ("Gemm", {"transB": 1}, (4, 256), (64, 256), "relu"),  # gemm
    ("Gemm", {"transB": 1}, (8, 128), (32, 128), ""),  # gemm
    ("Gemm", {"transB": 1}, (16, 64), (48, 64), "relu"),  # gemm
    # int8 pools, one quantization in and out as TFLite's (tflite_pools): the integer taps of
    # int8/pools.py, at the shared models' shapes (kws' 25 x 5 and ResNet-8's 8 x 8 planes,
    # the VWW models' 3 x 3) and a few others
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 16, 32, 32), None, ""),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     (1, 24, 20, 20), None, ""),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2]}, (1, 32, 15, 15), None, ""),
    ("AveragePool", {"kernel_shape": [4, 4], "strides": [4, 4]}, (1, 64, 8, 8), None, ""),
    ("AveragePool", {"kernel_shape": [7, 7]}, (1, 96, 7, 7), None, ""),  # a whole plane
    ("AveragePool", {"kernel_shape": [10, 3]}, (1, 48, 10, 3), None, ""),
    ("AveragePool", {"kernel_shape": [25, 5]}, (1, 64, 25, 5), None, ""),
    ("AveragePool", {"kernel_shape": [8, 8]}, (1, 64, 8, 8), None, ""),
    ("AveragePool", {"kernel_shape": [3, 3]}, (1, 256, 3, 3), None, ""),
    ("AveragePool", {"kernel_shape": [5, 5]}, (1, 128, 5, 5), None, ""),
    ("Add", {}, (1, 32, 20, 20), None, ""),
    ("Add", {}, (1, 64, 10, 10), None, ""),
    ("GlobalAveragePool", {}, (1, 64, 7, 7), None, ""),
    ("GlobalAveragePool", {}, (1, 256, 3, 3), None, ""),
)


def _out_hw(shape: Shape, attrs: dict) -> list[int]:
    k = attrs.get("kernel_shape", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    st = attrs.get("strides", [1, 1])
    return [(shape[2 + d] + p[d] + p[d + 2] - k[d]) // st[d] + 1 for d in range(2)]


CHUNK = 8  # probe layers per model: its weights and arena stay in L2, as an MCU model's do


def probe_model(cases: tuple = CASES):  # noqa: ANN201 (onnx.ModelProto)
    """The float model of ``cases`` (one branch each, in order) and one view."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inputs, outputs, inits = [], [], [], []
    for i, (op, attrs, shape, wshape, after) in enumerate(cases):
        x = f"x{i}"
        if after == "stem":  # a TFLite stem: the graph input NHWC, transposed, then the conv
            n, c, h, w_ = shape
            inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, h, w_, c]))
            nodes.append(helper.make_node("Transpose", [x], [f"{x}t"], name=f"t{i}",
                                          perm=[0, 3, 1, 2]))
            x = f"{x}t"
        else:
            inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, list(shape)))
        args = [x]
        if op == "Add":
            inputs.append(helper.make_tensor_value_info(f"x{i}b", TensorProto.FLOAT, list(shape)))
            args.append(f"x{i}b")
        if wshape is not None:
            w = (rng.standard_normal(wshape) * 0.1).astype(np.float32)
            b = (rng.standard_normal(wshape[0]) * 0.1).astype(np.float32)
            inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
            args += [f"w{i}", f"b{i}"]
        y = f"y{i}" if after else f"out{i}"
        nodes.append(helper.make_node(op, args, [y], name=f"n{i}", **attrs))
        if after in ("relu", "stem"):
            nodes.append(helper.make_node("Relu", [y], [f"out{i}"], name=f"r{i}"))
        elif after == "add":
            ys = [shape[0], wshape[0]] if wshape else list(shape)  # the conv's output shape
            if len(shape) == 4:
                ys += _out_hw(shape, attrs)
            inputs.append(helper.make_tensor_value_info(f"x{i}r", TensorProto.FLOAT, ys))
            nodes.append(helper.make_node("Add", [y, f"x{i}r"], [f"out{i}"], name=f"a{i}"))
        outputs.append(helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, None))
    # one view: a Reshape the memory plan puts on its input (the C call, nothing else)
    inputs.append(helper.make_tensor_value_info("xv", TensorProto.FLOAT, [1, 8, 4, 4]))
    inits.append(numpy_helper.from_array(np.array([1, 128], np.int64), "vshape"))
    nodes.append(helper.make_node("Reshape", ["xv", "vshape"], ["outv"], name="view"))
    outputs.append(helper.make_tensor_value_info("outv", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "int8_probe", inputs, outputs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto


def quantized_probe(folder: Path, cases: tuple = CASES) -> Path:
    """The probe model of ``cases`` quantized by onnxruntime (QDQ, int8, per-channel weights)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    proto = probe_model(cases)
    src, out = folder / "probe_float.onnx", folder / "probe_int8.onnx"
    onnx.save(proto, src)
    rng = np.random.default_rng(1)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in proto.graph.input}
    # non-negative, as activations after a ReLU are: the input zero point is then -128, as in
    # most layers of a TFLite model, and the C's (x + 128) is x's bits read unsigned, which the
    # compiler multiplies with cheaper instructions than (x - z) for another z
    feeds = [{k: np.abs(rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
             for _ in range(2)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self):  # noqa: ANN201 (onnxruntime's interface)
            return next(self.items, None)

    logging.disable(logging.WARNING)  # its advice to pre-process the model, on every call
    try:
        quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)
    onnx.save(tflite_pools(onnx.load(out)), out)
    return out


POOL_SCALE = 5.0 / 255  # the probe's inputs |N(0, 1)|: [0, 5) in 255 steps, zero point -128


def tflite_pools(proto):  # noqa: ANN001, ANN201 (onnx.ModelProto)
    """``proto`` with every MaxPool/AveragePool that onnxruntime left in float (a pool of a graph
    input: it quantizes a pool only after a quantized op) between a QuantizeLinear and a
    DequantizeLinear of one scale and zero point on both sides, as TFLite's int8 pools are (so
    the C runs the integer pool of the shared models, not the float one); a stem's Transpose
    (of a graph input, left float too) gets its output's quantization on its input, as a TFLite
    model's NHWC input is quantized before it (its conv then reads the NHWC rows in place)."""
    from onnx import TensorProto, helper

    graph = proto.graph
    graph.initializer.extend([helper.make_tensor("pool_scale", TensorProto.FLOAT, [], [POOL_SCALE]),
                              helper.make_tensor("pool_zero", TensorProto.INT8, [], [-128])])

    def qdq(x: str, q: list[str], tag: str, out: str | None = None) -> str:
        """A QuantizeLinear then DequantizeLinear of ``x`` by ``q`` (into ``out``)."""
        out = out or f"{x}_{tag}d"
        nodes.extend([helper.make_node("QuantizeLinear", [x, *q], [f"{x}_{tag}q"]),
                      helper.make_node("DequantizeLinear", [f"{x}_{tag}q", *q], [out])])
        return out

    nodes: list = []
    quantized = {n.input[0]: n.input[1:] for n in graph.node if n.op_type == "QuantizeLinear"}
    for node in graph.node:
        if node.op_type == "Transpose" and node.output[0] in quantized:  # a stem's: int8 too
            node.input[0] = qdq(node.input[0], quantized[node.output[0]], "t")
        if node.op_type not in POOLS:
            nodes.append(node)
            continue
        q, y = ["pool_scale", "pool_zero"], node.output[0]
        node.input[0], node.output[0] = qdq(node.input[0], q, "p"), f"{y}_pf"
        nodes.append(node)
        qdq(f"{y}_pf", q, "p", y)
    del graph.node[:]
    graph.node.extend(nodes)
    return proto


_BOUNDARY = CONVERSIONS


def chunks(cases: tuple = CASES, size: int = CHUNK) -> list[tuple]:
    """``cases`` in models of at most ``size`` layers, convs with convs and Gemms with Gemms: a
    kernel's time depends on what ran before it (the caches its neighbours leave), and a CNN's
    convs follow convs while an MLP's Gemms follow Gemms."""
    groups: dict[str, list] = {}
    for case in cases:
        groups.setdefault(case[0] if case[0] in ("Conv", "Gemm") else "other", []).append(case)
    return [tuple(g[i:i + size]) for g in groups.values() for i in range(0, len(g), size)]


def measure_kernels(budget_s: float = 1.5) -> list[tuple[str, list, float]]:
    """(kind, its cwork.Work items, measured seconds) of every kernel of the probe's int8 C; kind
    is "view", "boundary" (the probe's own QuantizeLinear/DequantizeLinear) or "layer"; a
    depthwise layer in x86's vectors comes again as "portable", counted as the portable C."""
    from opfuse.backends.c.emit import c_schedule, emit_c
    from opfuse.backends.c.int8.requant import ROUNDING, TFLITE
    from opfuse.cost.cwork import is_view, kernel_work
    from opfuse.kernelplan.conv8 import has_gemv8
    from opfuse.kernelplan.dw8 import has_dw8
    from opfuse.measure.run.host import manifest
    from opfuse.measure.run.kernel_times import time_kernels
    from opfuse.measure.validate.per_kernel import random_feeds
    from opfuse.pipeline import compile_model

    found = []
    groups = chunks()
    for cases in groups:
        with tempfile.TemporaryDirectory(prefix="opfuse-int8probe-") as tmp:
            folder = Path(tmp)
            result = compile_model(quantized_probe(folder, cases), "x86-host")
            gemv = has_gemv8(result.target.isa.name)  # its batch-1 Gemms run the GEMV
            dw = has_dw8(result.target.isa.name)  # its depthwise convs the vectors of pixels
            # requantize as TFLite does (double rounding), as the C of every .tflite model does;
            # the C of an ONNX QDQ model rounds once, a cheaper requantization not measured here
            result.optimized.meta[ROUNDING] = TFLITE
            sched = c_schedule(result, cascades=False)  # the probe times layer-by-layer kernels
            model, part = sched.model, sched.partition
            emit_c(result, folder / "c", cascades=False)
            times = time_kernels(folder / "c", random_feeds(manifest(folder / "c")),
                                 budget_s / len(groups))
        nodes = {n.name: n for n in model.graph}
        for kernel, t in zip(part.kernels, times.seconds, strict=True):
            members = [nodes[n] for n in kernel.nodes if n in nodes]
            kind = "view" if is_view(members) else "layer"
            if all(n.op_type in _BOUNDARY for n in members):
                kind = "boundary"  # the probe's float inputs and outputs, not a probe layer
            works = kernel_work(members, gemv, dw)
            found.append((kind, works, t))
            if kind == "layer" and works[0].path == "depthwise_zmm":
                # the same time on the portable count (the depthwise path): the rates of a
                # depthwise conv the vectors do not take (ONNX rounding, a column stride of 3)
                found.append(("portable", kernel_work(members, gemv), t))
    return found


COLUMNS = ("lane_macs", "tail_macs", "outputs", "loops")


def fit_class(rows: list[tuple[float, ...]]) -> tuple[float, ...]:
    """Non-negative seconds per unit of each of ``COLUMNS`` minimising the relative error of
    ``rows`` = (*COLUMNS, seconds); a cost the fit drives negative is dropped, the rest refitted."""
    n = len(COLUMNS)
    a = np.array([r[:n] for r in rows], float).reshape(-1, n)
    y = np.array([r[n] for r in rows], float)
    keep = y > 0
    a, y = a[keep], y[keep]
    if not len(y):
        return (0.0,) * n
    scale = np.where(a.max(axis=0) > 0, a.max(axis=0), 1.0)
    weighted = a / scale / y[:, None]
    active = [j for j in range(n) if a[:, j].any()]
    coef = np.zeros(n)
    while active:
        sol = np.linalg.lstsq(weighted[:, active], np.ones(len(y)), rcond=None)[0]
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    coef = coef / scale
    return tuple(float(c) for c in coef)


def _columns(work) -> tuple[float, ...]:  # noqa: ANN001 (cwork.Work)
    return tuple(float(getattr(work, c)) for c in COLUMNS)


def calibrate_int8c(
    measure: Callable[[], list[tuple[str, list, float]]] = measure_kernels,
) -> dict:
    """The ``[perf.int8c]`` figures (``opfuse.targets.int8c``) from the probe (``measure`` is
    injectable for tests): each path fitted on the kernels that run it alone, then the
    ``epilogue`` path on what the kernels with a fused epilogue take beyond their anchor's fit."""
    found = [f for f in measure() if f[0] != "boundary"]
    views = [t for k, _, t in found if k == "view"]
    layers = [(works, t) for k, works, t in found if k in ("layer", "portable") and works]
    fitted: dict[str, tuple[float, ...]] = {}
    for path in sorted({w[0].path for w, _ in layers if len(w) == 1}):
        fitted[path] = fit_class([(*_columns(w[0]), t)
                                  for w, t in layers if len(w) == 1 and w[0].path == path])
    extra = []
    for works, t in layers:
        if len(works) > 1 and works[0].path in fitted:
            anchor = sum(c * x for c, x in zip(fitted[works[0].path], _columns(works[0]),
                                               strict=True))
            extra += [(*_columns(w), (t - anchor) / (len(works) - 1)) for w in works[1:]]
    if extra:
        fitted["epilogue"] = fit_class(extra)
    tables: dict[str, dict[str, float]] = {"mac_s": {}, "tail_s": {}, "output_s": {},
                                           "loop_s": {}}
    for path, (per_mac, per_tail, per_out, per_loop) in fitted.items():
        tables["mac_s"][path], tables["tail_s"][path] = per_mac, per_tail
        tables["output_s"][path], tables["loop_s"][path] = per_out, per_loop
    return Int8Figures(
        dispatch_overhead_s=statistics.median(views) if views else 0.0,
        **tables,
        kernels=sum(1 for f in found if f[0] != "portable"),
    )


class Int8Figures(dict):
    """The ``[perf.int8c]`` figures; prints as one readable row in ``opfuse calibrate``'s table."""

    def __str__(self) -> str:
        rates = ", ".join(f"{k} {1e-9 / v:.0f}" for k, v in self.get("mac_s", {}).items() if v)
        return f"{self.get('kernels', 0)} probe kernels; GMAC/s in whole vectors: {rates}"
