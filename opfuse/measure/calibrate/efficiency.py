"""Per-class compute efficiency of this machine, for ``opfuse calibrate`` (``[perf.efficiency]``).

For each kernel class (``opfuse.cost.kclass``) a few one-node ONNX models at sizes typical of mobile
CNN layers (fp32, batch 1, NCHW, weights as initializers so onnxruntime prepacks them as it does for
a real model) run in onnxruntime with one thread (``ORT_ENABLE_EXTENDED``, as the fused kernels of
the ``host`` target run). For each shape::

    efficiency = FLOPs / (median session.run time - per-call overhead) / (2 x measured GEMM peak)

with FLOPs counted exactly as the cost model counts them (``opfuse.ops`` on the imported model), so
that at each measured shape the model's compute time equals the measured time. A class's figure is
the median over its shapes, capped to (0, 1].

Every class, memory-bound ones included, is expressed as a fraction of the compute peak, because the
cost model has one efficiency (it scales compute time; the memory time keeps the level's measured
bandwidth). The memory-bound classes (pool, elementwise, reduce) are measured with every operand in
L2 (about 1 MB in all), far from any bandwidth ceiling, so their figure is the op's in-cache
throughput ceiling (the instructions it spends per element), not a bandwidth: in DRAM the memory
time, which roofline takes the max with, still decides. A bytes/s ratio instead would have scaled
the memory time, mixing the kernel's code with the level it reads from.

The ``gemm`` class is measured at a pixels x channels product shape (not the 1024^3 peak itself); a
batch-1 classifier is a GEMV, bound by reading its weights, which the memory time already models.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

Shape = tuple[int, ...]

# (class, op, attributes, activation input shapes, weight shapes): per class, typical CNN layers.
# The elementwise class mixes the standalone elementwise ops of an unfused CNN (residual Add, Relu,
# Clip as Relu6, BatchNormalization): onnxruntime spends about the same time per element on each
# while opfuse counts 1 (Add, Relu) or 2 (Clip, BatchNormalization) FLOPs per element, so one op
# alone would bias the class by up to 2x; one shape per op weighs the four equally.
_CONV3 = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
_POOL3 = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}


def _dw(channels: int, stride: int = 1) -> dict:
    return {**_CONV3, "group": channels, "strides": [stride, stride]}


CASES: tuple[tuple[str, str, dict, tuple[Shape, ...], tuple[Shape, ...]], ...] = (
    ("conv", "Conv", _CONV3, ((1, 32, 56, 56),), ((32, 32, 3, 3), (32,))),
    ("conv", "Conv", _CONV3, ((1, 96, 28, 28),), ((96, 96, 3, 3), (96,))),
    ("conv", "Conv", _CONV3, ((1, 192, 14, 14),), ((192, 192, 3, 3), (192,))),
    ("conv1x1", "Conv", {}, ((1, 32, 56, 56),), ((128, 32, 1, 1), (128,))),
    ("conv1x1", "Conv", {}, ((1, 256, 28, 28),), ((64, 256, 1, 1), (64,))),
    ("conv1x1", "Conv", {}, ((1, 128, 14, 14),), ((512, 128, 1, 1), (512,))),
    ("depthwise", "Conv", _dw(32), ((1, 32, 112, 112),), ((32, 1, 3, 3), (32,))),
    ("depthwise", "Conv", _dw(64), ((1, 64, 56, 56),), ((64, 1, 3, 3), (64,))),
    ("depthwise", "Conv", _dw(128, 2), ((1, 128, 56, 56),), ((128, 1, 3, 3), (128,))),
    ("depthwise", "Conv", _dw(256), ((1, 256, 14, 14),), ((256, 1, 3, 3), (256,))),
    ("depthwise", "Conv", _dw(512), ((1, 512, 7, 7),), ((512, 1, 3, 3), (512,))),
    ("gemm", "Gemm", {"transB": 1}, ((196, 512),), ((512, 512), (512,))),
    ("gemm", "Gemm", {"transB": 1}, ((784, 128),), ((256, 128), (256,))),
    ("pool", "MaxPool", _POOL3, ((1, 64, 56, 56),), ()),
    ("pool", "MaxPool", _POOL3, ((1, 16, 112, 112),), ()),
    ("pool", "MaxPool", _POOL3, ((1, 128, 28, 28),), ()),
    ("elementwise", "Add", {}, ((1, 64, 28, 28), (1, 64, 28, 28)), ()),
    ("elementwise", "Relu", {}, ((1, 32, 56, 56),), ()),
    ("elementwise", "Clip", {}, ((1, 96, 28, 28),), ((), ())),
    ("elementwise", "BatchNormalization", {}, ((1, 64, 28, 28),), ((64,),) * 4),
    ("reduce", "GlobalAveragePool", {}, ((1, 1280, 7, 7),), ()),
    ("reduce", "GlobalAveragePool", {}, ((1, 256, 14, 14),), ()),
)


def _model(op: str, attrs: dict, inputs: tuple[Shape, ...], weights: tuple[Shape, ...]):  # noqa: ANN202
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    names = [f"x{i}" for i in range(len(inputs))] + [f"w{i}" for i in range(len(weights))]
    inits = [
        numpy_helper.from_array((rng.random(s) + 0.5).astype(np.float32), f"w{i}")
        for i, s in enumerate(weights)
    ]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], name="n0", **attrs)],
        "g",
        [
            helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, s)
            for i, s in enumerate(inputs)
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto


def _flops(proto) -> int:  # noqa: ANN001 (onnx.ModelProto)
    from opfuse import ops
    from opfuse.frontends import import_proto

    model = import_proto(proto, "<calibrate>")
    return sum(ops.flops(n) for n in model.graph)


def _median_run_s(proto, budget_s: float) -> float:  # noqa: ANN001 (onnx.ModelProto)
    from opfuse.measure.sessions import ENABLE_EXTENDED, median_run_s, one_thread_session

    sess = one_thread_session(proto, ENABLE_EXTENDED)
    return median_run_s(sess, budget_s, seed=1, warmup=3, min_runs=7, max_runs=2000)


class Fractions(dict):
    """class -> fraction of peak; prints as one readable row in ``opfuse calibrate``'s table."""

    def __str__(self) -> str:
        return ", ".join(f"{k} {v:.3f}" for k, v in self.items())


def measure_efficiency(
    peak_macs_per_s: float,
    overhead_s: float,
    budget_s: float = 0.25,
    timer: Callable[[object, float], float] = _median_run_s,
) -> Fractions:
    """Per-class efficiency on this machine (module docstring); ``timer`` is injectable for tests."""
    found: dict[str, list[float]] = {}
    for klass, op, attrs, inputs, weights in CASES:
        proto = _model(op, attrs, inputs, weights)
        t = timer(proto, budget_s)
        work_s = max(t - overhead_s, 0.1 * t)  # the model adds the dispatch overhead back
        found.setdefault(klass, []).append(_flops(proto) / work_s / (2 * peak_macs_per_s))
    return Fractions(
        {k: float(min(1.0, max(1e-4, statistics.median(v)))) for k, v in found.items()}
    )
