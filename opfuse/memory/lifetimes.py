"""Live ranges of the values a kernel schedule writes to memory (the activation arena).

A step is a kernel's index in ``Partition.kernels`` (schedule order). The arena holds graph inputs,
values a kernel writes (``Kernel.outputs``) and graph outputs; weights (initializers) live in flash
and values kept inside a fused kernel never touch memory, so neither appears here. A cascade's
intermediates are not arena tensors either: each is a ring buffer (``Kernel.ring_buffers``), an
arena tensor of its band size, ``rows / height`` of the whole, live for the cascade's step only
(named ``RING_PREFIX + value``, kind ``RING``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx_ir as ir

from opfuse.ops import numel
from opfuse.schedule import Partition, RingBuffer

ALIGNMENT = 16  # bytes; offsets and sizes in the arena are multiples of this (TFLite Micro's rule)

INPUT = "input"
INTERMEDIATE = "intermediate"
OUTPUT = "output"
RING = "ring"  # a cascade's ring buffer
RING_PREFIX = "ring:"


def align(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment``."""
    return -(-nbytes // alignment) * alignment


@dataclass(frozen=True)
class TensorLife:
    name: str
    size_bytes: int  # unaligned: numel * element size
    first: int  # step that writes it (0 for graph inputs)
    last: int  # last step that reads it, inclusive (the last step for graph outputs)
    kind: str  # INPUT, INTERMEDIATE, OUTPUT (a graph input that is also an output) or RING

    @property
    def aligned_bytes(self) -> int:
        return align(self.size_bytes)

    def live_at(self, step: int) -> bool:
        return self.first <= step <= self.last


def value_bytes(value: ir.Value, bytes_per_element: int | None = None) -> int:
    """Bytes of ``value``. ``bytes_per_element`` re-sizes floating-point values only (analysing an
    fp32 model at int8 or fp16 activations); integer and bool values (indices, masks) keep their
    own element size. A value of unknown size (after an opaque op nothing describes) counts 0 bytes:
    analyze lists it and marks its totals as lower bounds instead of inventing a size."""
    dtype = value.dtype
    if value.shape is None or not all(isinstance(d, int) and d >= 0 for d in value.shape) or (
        dtype is None and value.const_value is None
    ):
        return 0
    if dtype is None:
        itemsize = float(bytes_per_element or 4)
    elif bytes_per_element is not None and dtype.is_floating_point():
        itemsize = float(bytes_per_element)
    else:
        itemsize = float(dtype.itemsize)
    return math.ceil(numel(value) * itemsize)


def ring_bytes(ring: RingBuffer, value: ir.Value, bytes_per_element: int | None = None) -> int:
    """Bytes of a cascade's ring buffer at the analysed precision: ``rows / height`` of the value."""
    return -(-value_bytes(value, bytes_per_element) * ring.rows // ring.height)


def live_ranges(
    model: ir.Model, partition: Partition, bytes_per_element: int | None = None
) -> tuple[TensorLife, ...]:
    """The arena's tensors on ``partition``'s schedule, ordered by (first step, name)."""
    graph = model.graph
    values: dict[str, ir.Value] = {}
    for node in graph:
        for out in node.outputs:
            if out is not None and out.name:
                values[out.name] = out
    graph_inputs = {v.name: v for v in graph.inputs if v.name}
    values.update(graph_inputs)
    graph_outputs = {v.name for v in graph.outputs if v.name}
    last_step = max(len(partition.kernels) - 1, 0)

    first: dict[str, int] = {name: 0 for name in graph_inputs}
    last: dict[str, int] = dict(first)
    for step, kernel in enumerate(partition.kernels):
        for name in kernel.outputs:
            if name in values and name not in first:
                first[name] = step
                last[name] = step
    for step, kernel in enumerate(partition.kernels):
        for name in kernel.inputs:
            if name in first:  # weights and unknown names are not in the arena
                last[name] = max(last[name], step)
    for name in graph_outputs & first.keys():
        last[name] = last_step

    lives = []
    for name, start in first.items():
        if name in graph_outputs:
            kind = OUTPUT
        elif name in graph_inputs:
            kind = INPUT
        else:
            kind = INTERMEDIATE
        size = value_bytes(values[name], bytes_per_element)
        lives.append(TensorLife(name, size, start, last[name], kind))
    for step, kernel in enumerate(partition.kernels):
        for ring in kernel.ring_buffers:
            size = ring_bytes(ring, values[ring.value], bytes_per_element)
            lives.append(TensorLife(RING_PREFIX + ring.value, size, step, step, RING))
    # stable: ties keep the schedule order they were found in, never a name's (names come from
    # the model; a layout that changed with them would change the objects)
    return tuple(sorted(lives, key=lambda t: t.first))
