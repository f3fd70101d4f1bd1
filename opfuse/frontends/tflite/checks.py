"""What the TFLite reader checks on every tensor and operator it decodes, so later stages never
meet an index out of range, a zero stride or an infinite scale (docs/architecture.md, "Layout of
TFLite models"). Each check raises OpfuseError with one line naming the tensor or operator.

Checking attributes against shapes (a stride larger than the input, a group that does not divide
the channels) is the import limits' job, for both formats; these are the facts a TFLite file must
get right to be read at all.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from opfuse.errors import OpfuseError

if TYPE_CHECKING:
    from opfuse.frontends.tflite.reader import Operator, Tensor

MAX_ELEMENTS = 2**40  # beyond any model: a corrupt shape, refused before anything allocates it
# Option fields that divide or step (TFLite's schema gives them no meaning below 1)
POSITIVE_OPTIONS = ("StrideH", "StrideW", "StrideD", "DilationHFactor", "DilationWFactor",
                    "DilationDFactor", "FilterHeight", "FilterWidth", "BlockSize")


def check_shape(index: int, name: str, shape: tuple[int, ...]) -> None:
    for axis, dim in enumerate(shape):
        if dim < 0:
            raise OpfuseError(f"tensor {index} '{name}': dimension {axis} is {dim}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise OpfuseError(f"tensor {index} '{name}': shape {list(shape)} has more than 2^40 "
                          "elements")


def check_tensor(t: Tensor) -> None:
    """Scales finite and positive, one zero point per scale (or one for all)."""
    q = t.quant
    if q is None:
        return
    bad = [float(s) for s in q.scale if not (math.isfinite(float(s)) and float(s) > 0)]
    if bad:
        raise OpfuseError(f"tensor {t.index} '{t.name}': quantization scale {bad[0]} "
                          "(scales must be finite and positive)")
    if q.zero_point.size not in (1, q.scale.size):
        raise OpfuseError(f"tensor {t.index} '{t.name}': {q.zero_point.size} zero points for "
                          f"{q.scale.size} scales")
    if t.dtype.kind in "iu":
        info = np.iinfo(t.dtype if t.dtype.itemsize <= 4 else np.int64)
        out = [int(z) for z in q.zero_point if not info.min <= int(z) <= info.max]
        if out:
            raise OpfuseError(f"tensor {t.index} '{t.name}': zero point {out[0]} does not fit "
                              f"{t.dtype}")


def check_operator(op: Operator, tensors: int) -> None:
    """Tensor indices in range (-1 marks an omitted optional input) and step options >= 1."""
    where = f"operator {op.index} ({op.opcode})"
    for kind, indices, lowest in (("input", op.inputs, -1), ("output", op.outputs, 0)):
        for i in indices:
            if not lowest <= i < tensors:
                raise OpfuseError(f"{where}: {kind} tensor {i} does not exist (the graph has "
                                  f"{tensors} tensors)")
    if op.options is None:
        return
    for name in POSITIVE_OPTIONS:
        value = op.options.values.get(name)
        if value is not None and value < 1:
            raise OpfuseError(f"{where}: option {name} is {value}; it must be at least 1")
    for name, value in op.options.values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise OpfuseError(f"{where}: option {name} is {value}")

