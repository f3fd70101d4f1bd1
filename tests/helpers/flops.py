"""FLOPs the cost model gives each op of a small model written as ``onnx.parser`` text."""

from __future__ import annotations

import onnx
import onnx.parser

from opfuse.cost import cost_model
from opfuse.frontends import import_proto
from opfuse.fusion import trivial_partition
from opfuse.targets import load_target

_HEAD = '<ir_version: {ir}, opset_import: ["" : {opset}]>\n'


def op_flops(body: str, opset: int = 17) -> dict[str, int]:
    """Op type -> FLOPs of its kernel in the cost model, for a model of one or a few nodes."""
    text = _HEAD.format(ir=10 if opset >= 21 else 8, opset=opset) + body
    proto = onnx.parser.parse_model(text)
    if opset != 18:  # the checker calls GroupNormalization-18 deprecated; exporters still write it
        onnx.checker.check_model(proto, full_check=True)
    model = import_proto(proto, "<test>")
    report = cost_model(model, trivial_partition(model), load_target("x86-host"))
    by_op: dict[str, int] = {}
    for kernel in report.kernels:
        (op,) = kernel.ops
        by_op[op] = by_op.get(op, 0) + kernel.flops
    return by_op
