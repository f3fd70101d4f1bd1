"""What generate() records per kernel beside its C: the debug-dump entry (``validate
--per-kernel``), whether it has anything to run, and the stack scratch its body declares."""

from __future__ import annotations

import math
import re

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.ctype import FLOAT, ctype_of
from opfuse.backends.c.manifest import DumpRecord, KernelRecord, RingRecord
from opfuse.backends.c.tensors import Store
from opfuse.frontends.limits import refuse

_LOCAL_ARRAY = re.compile(r"^\s*(float|int8_t|uint8_t|int16_t|int32_t|int64_t)\s+\w+((?:\[\d+\])+)")
_SIZES = {"float": 4, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "int32_t": 4, "int64_t": 8}


def outputs_empty(kernel, members: list[ir.Node]) -> bool:
    """Every output of the kernel has a zero dim (a Slice with a negative step from the start)."""
    values = {o.name: o for n in members for o in n.outputs if o is not None}
    shapes = [values[name].shape for name in kernel.outputs if name in values]
    return bool(shapes) and all(s is not None and 0 in tuple(s) for s in shapes)


def debug_entry(index: int, fname: str, kernel, members: list[ir.Node], store: Store,
                 calls: CWriter) -> KernelRecord:
    """One kernel's manifest entry for the debug dump, and its ``OPFUSE_DEBUG_OUT`` lines (empty
    macros unless built with -DOPFUSE_DEBUG_DUMP): each output is handed over right after the
    kernel ran, before a later kernel may reuse its bytes."""
    producer = {o.name: n for n in members for o in n.outputs if o is not None}
    outs = []
    for name in kernel.outputs:
        node = producer.get(name)
        value = next((o for o in node.outputs if o is not None and o.name == name), None) \
            if node is not None else None
        if value is None or not store.is_arena(value):
            continue
        ct = ctype_of(value) or FLOAT
        calls(f"OPFUSE_DEBUG_OUT({index}, {len(outs)}, {store.where(value, node)});")
        outs.append(DumpRecord(name, dims(value, node), ct.name))
    # a cascade's members; its rings, or an attention kernel's scratch row, as analyze reports them
    return KernelRecord(
        index, fname, kernel.name, tuple(kernel.ops), tuple(kernel.nodes), tuple(outs),
        tuple(tuple(m.nodes) for m in kernel.members) if kernel.is_cascade else None,
        tuple(RingRecord(r.value, r.rows, r.nbytes) for r in kernel.ring_buffers)
        if kernel.ring_buffers else None)


def checked_stack(lines: list[str], index: int, kernel) -> int:  # noqa: ANN001
    """The kernel's stack scratch, refused over the ``stack`` limit: a 4M-wide MaxPool row's
    16 MiB buffer overflowed the host's stack (SIGSEGV in validate) before this check."""
    need = stack_scratch_bytes(lines)
    refuse(f"C backend: kernel {index} ({'+'.join(kernel.ops)}): its stack scratch", need, "stack")
    return need


def stack_scratch_bytes(lines: list[str]) -> int:
    """Bytes of arrays a kernel body declares on the stack (tiles, line buffers): memory
    outside the arena that a deployment must budget for its stack. Arrays in sibling blocks are
    added up, so this is an upper bound."""
    total = 0
    for line in lines:
        match = _LOCAL_ARRAY.match(line)
        if match:
            total += _SIZES[match.group(1)] * math.prod(
                int(n) for n in re.findall(r"\d+", match.group(2)))
    return total
