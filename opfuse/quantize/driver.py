"""``opfuse quantize``: a float model to QDQ ONNX calibrated at its fused kernels' boundaries.

compile (import, canonicalize: BN folded; partition for the target) -> emit the canonicalized
float ONNX -> place Q/DQ (placement.py) -> run the float model over the calibration samples with
those tensors as outputs (ranges.py) -> int8 parameters -> the QDQ model -> accuracy on the
evaluation samples (accuracy.py) -> with ``io="int8"``, int8 graph inputs and outputs
(int8_io.py). Nothing is written here: the caller saves ``Quantized.proto``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from opfuse.compiled import CompileResult
from opfuse.errors import OpfuseError
from opfuse.quant import ONNX, ROUNDING
from opfuse.quantize.accuracy import AccuracyReport, evaluate
from opfuse.quantize.data import InputShape, Samples, load_samples
from opfuse.quantize.int8_io import IO_CHOICES, IoTensor, float_io, int8_io
from opfuse.quantize.placement import Placement, bounded_params, insert_qdq, place
from opfuse.quantize.ranges import Range, asymmetric, collect_ranges, session

QDQ_OPSET = 13  # per-axis DequantizeLinear
QUANTIZE_KEY = "opfuse.quantize"
_STALE_KEYS = ("opfuse.kernels", "opfuse.flavor")  # they describe the float model's nodes


@dataclass
class Collapsed:
    """A calibrated tensor whose range collapsed (a constant activation)."""

    kernel: str  # the kernel writing it ("input" for a graph input)
    index: int  # its kernel index, -1 for a graph input
    tensor: str
    value: float


@dataclass
class Quantized:
    proto: onnx.ModelProto  # the QDQ model
    float_proto: onnx.ModelProto  # the canonicalized float model it was calibrated on
    result: CompileResult
    placement: Placement
    ranges: dict[str, Range]
    params: dict[str, tuple[float, int]]
    method: str
    per_channel: bool
    calibration: Samples
    evaluation: Samples
    eval_held_out: bool  # the evaluation samples are a split of the calibration data
    accuracy: AccuracyReport
    collapsed: list[Collapsed] = field(default_factory=list)
    kept_float: list[str] = field(default_factory=list)  # kernels left float (--keep-float)
    io: list[IoTensor] = field(default_factory=list)  # the written model's inputs and outputs

    @property
    def int8_io(self) -> bool:
        return any(t.dtype == "int8" for t in self.io)

    def to_json(self) -> dict:
        counts: dict[str, int] = {}
        for op in self.placement.float_ops:
            counts[op] = counts.get(op, 0) + 1
        return {
            "model": self.result.source,
            "target": self.result.target.name,
            "method": self.method,
            "weights": "per-channel" if self.per_channel else "per-tensor",
            "calibration": {"data": self.calibration.where, "samples": self.calibration.count},
            "evaluation": {"data": self.evaluation.where, "samples": self.evaluation.count,
                           "held_out_split": self.eval_held_out},
            "quantized_tensors": len(self.placement.tensors),
            "kept_float": list(self.kept_float),
            "io": [t.to_json() for t in self.io],
            "float_ops": counts,
            "constant_ranges": [{"kernel": c.kernel, "index": c.index, "tensor": c.tensor,
                                 "value": c.value} for c in self.collapsed],
            **self.accuracy.to_json(),
        }


def float_onnx(result: CompileResult) -> onnx.ModelProto:
    """The canonicalized model as float ONNX at an opset with per-axis DequantizeLinear."""
    from opfuse.backends.onnx.emit import emit_onnx
    from opfuse.quant import is_quantized

    if is_quantized(result.optimized):
        raise OpfuseError(f"{result.source}: already quantized; quantize takes a float model")
    proto = emit_onnx(result.optimized, result.partition)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < QDQ_OPSET:
        from onnx import version_converter

        proto = version_converter.convert_version(proto, QDQ_OPSET)
    return proto


def input_shapes(proto: onnx.ModelProto) -> list[InputShape]:
    inits = {i.name for i in proto.graph.initializer}
    shapes = []
    for inp in proto.graph.input:
        if inp.name in inits:
            continue
        if inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise OpfuseError(f"input '{inp.name}' is not float32: quantize takes float inputs")
        dims = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
        shapes.append(InputShape(inp.name, dims))
    return shapes


def quantize(result: CompileResult, calibration: str | Path | Samples, *, method: str = "minmax",
             per_channel: bool = True, evaluation: str | Path | Samples | None = None,
             keep_float: tuple[str, ...] | list[str] = (), io: str = "float") -> Quantized:
    """Quantize the compiled float model ``result`` (see the module docstring); ``keep_float``
    names kernels (as the accuracy report does) or their nodes to leave float; ``io`` "int8":
    int8 graph inputs and outputs (int8_io.py), the accuracy still measured through the float
    boundary (the same arithmetic between the boundary Q and DQ)."""
    if io not in IO_CHOICES:
        raise OpfuseError(f"--io {io}: one of {', '.join(IO_CHOICES)}")
    proto = float_onnx(result)
    kernels = result.partition.without_cascades().kernels
    kept, keep = kept_kernels(kernels, keep_float)
    shapes = input_shapes(proto)
    cal = calibration if isinstance(calibration, Samples) else load_samples(calibration, shapes)
    held_out = evaluation is None
    if held_out:
        cal, ev = cal.split()
    else:
        ev = evaluation if isinstance(evaluation, Samples) else load_samples(evaluation, shapes, 1)
    plan = place(proto.graph, keep)
    ranges = collect_ranges(proto, plan.calibrated, cal, method)
    params = {t: asymmetric(r) for t, r in ranges.items()}
    params.update(plan.fixed)
    params.update({t: bounded_params(plan, t, params) for t in plan.bounded})
    qdq, dq_of = insert_qdq(proto, plan, params, per_tensor=not per_channel, keep=keep)
    _stamp(qdq, result, method, per_channel, kept, io)
    session(qdq)  # onnxruntime loads what is written, or this is an opfuse bug shown as one line
    written, boundary = qdq, float_io(qdq)
    if io == "int8":
        written, boundary = int8_io(qdq)
        session(written)
    kernel_of = {n: i for i, k in enumerate(kernels) for n in k.nodes}
    collapsed = [Collapsed(kernels[kernel_of[plan.producer[t]]].name if plan.producer[t] else
                           "input", kernel_of.get(plan.producer[t], -1), t, r.lo)
                 for t, r in ranges.items() if r.constant]
    tensors = [(i, k.name, t) for i, k in enumerate(kernels) for t in k.outputs if t in dq_of]
    accuracy = evaluate(proto, qdq, ev, tensors, dq_of, {c.tensor for c in collapsed},
                        {i: k.inputs for i, k in enumerate(kernels)})
    return Quantized(written, proto, result, plan, ranges, params, method, per_channel, cal, ev,
                     held_out, accuracy, collapsed, kept, boundary)


def kept_kernels(kernels, names) -> tuple[list[str], frozenset[str]]:  # noqa: ANN001 (Kernel)
    """(the kernels ``names`` keep float, their nodes' names): a name is a kernel's, as the
    accuracy report shows it, or one of its nodes'. An unknown name is an OpfuseError."""
    kept: list[str] = []
    nodes: set[str] = set()
    for name in names:
        hit = [k for k in kernels if k.name == name or name in k.nodes]
        if not hit:
            shown = ", ".join(k.name for k in kernels[:6]) + (", ..." if len(kernels) > 6 else "")
            raise OpfuseError(f"--keep-float {name}: no kernel or node of that name (the "
                              f"accuracy report names the kernels: {shown})")
        for k in hit:
            if k.name not in kept:
                kept.append(k.name)
                nodes.update(k.nodes)
    return kept, frozenset(nodes)


def _stamp(proto: onnx.ModelProto, result: CompileResult, method: str, per_channel: bool,
           kept: list[str], io: str = "float") -> None:
    props = {p.key: p.value for p in proto.metadata_props if p.key not in _STALE_KEYS}
    props[ROUNDING] = ONNX
    props[QUANTIZE_KEY] = json.dumps({"method": method, "target": result.target.name,
                                      "weights": "per-channel" if per_channel else "per-tensor",
                                      **({"kept_float": kept} if kept else {}),
                                      **({"io": io} if io != "float" else {})})
    del proto.metadata_props[:]
    onnx.helper.set_model_props(proto, props)
    for node in proto.graph.node:  # the float kernels' stamps; the int8 import partitions anew
        del node.metadata_props[:]
