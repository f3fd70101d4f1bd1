"""What ``model.json`` records about a generated C project, as typed records (docs/architecture.md,
"The C backend"): the C backend builds them, the file templates and the runners read them, and
this module alone turns them into JSON and back.

The JSON keeps the format of earlier opfuse versions (a float tensor has no ``ctype``, a tensor
without quantization no ``scale``, a kernel outside a cascade no ``members``), and reading accepts
a manifest that predates ``prefix`` or ``kernel_outputs``. ``opfuse/output`` adds ``files`` (what
was written), which these records leave to it."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class TensorRecord:
    """A graph input or output the C takes or returns, in the source model's layout."""

    name: str
    shape: tuple[int, ...]
    size: int  # elements
    ctype: str = "float"  # float, int8_t or uint8_t
    scale: float | None = None  # one quantization step, for an integer tensor that has one
    zero_point: int | None = None

    def to_json(self) -> dict:
        data: dict = {"name": self.name, "shape": list(self.shape), "size": self.size}
        if self.ctype != "float":
            data["ctype"] = self.ctype
        if self.scale is not None:
            data["scale"], data["zero_point"] = self.scale, self.zero_point
        return data

    @classmethod
    def from_json(cls, data: dict) -> TensorRecord:
        return cls(data["name"], tuple(data["shape"]), int(data["size"]),
                   data.get("ctype", "float"), data.get("scale"), data.get("zero_point"))


@dataclass(frozen=True)
class DumpRecord:
    """One kernel output the debug build (``-DOPFUSE_DEBUG_DUMP``) hands over after the kernel."""

    name: str
    shape: tuple[int, ...]
    ctype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "ctype": self.ctype}

    @classmethod
    def from_json(cls, data: dict) -> DumpRecord:
        return cls(data["name"], tuple(data["shape"]), data["ctype"])


@dataclass(frozen=True)
class RingRecord:
    """A cascade's ring buffer: the value it holds, its rows and bytes, as analyze reports them."""

    value: str
    rows: int
    bytes: int

    def to_json(self) -> dict:
        return {"value": self.value, "rows": self.rows, "bytes": self.bytes}


@dataclass(frozen=True)
class KernelRecord:
    """One kernel of the schedule: its C function, ops, nodes and the outputs the dump hands over;
    a cascade also lists its members and rings, an attention kernel its scratch row."""

    index: int
    function: str
    name: str
    ops: tuple[str, ...]
    nodes: tuple[str, ...]
    outputs: tuple[DumpRecord, ...]
    members: tuple[tuple[str, ...], ...] | None = None
    ring_buffers: tuple[RingRecord, ...] | None = None

    def to_json(self) -> dict:
        data = {"index": self.index, "function": self.function, "name": self.name,
                "ops": list(self.ops), "nodes": list(self.nodes),
                "outputs": [o.to_json() for o in self.outputs]}
        if self.members is not None:
            data["members"] = [list(m) for m in self.members]
        if self.members is not None or self.ring_buffers:  # an attention kernel's scratch row too
            data["ring_buffers"] = [r.to_json() for r in self.ring_buffers or ()]
        return data

    @classmethod
    def from_json(cls, data: dict) -> KernelRecord:
        members, rings = data.get("members"), data.get("ring_buffers")
        return cls(int(data["index"]), data["function"], data["name"], tuple(data["ops"]),
                   tuple(data["nodes"]), tuple(DumpRecord.from_json(o) for o in data["outputs"]),
                   None if members is None else tuple(tuple(m) for m in members),
                   None if rings is None else tuple(RingRecord(**r) for r in rings))


@dataclass(frozen=True)
class Manifest:
    """``model.json``: the model, target and options the C was made for, its sizes, its inputs
    and outputs, and (for ``validate --per-kernel`` and the kernel timer) every kernel."""

    source: str
    target: str
    fused: bool
    planner: str
    kernels: int
    arena_bytes: int  # OPFUSE_ARENA_BYTES
    stack_scratch_bytes: int  # OPFUSE_STACK_SCRATCH_BYTES
    weights_bytes: int
    inputs: tuple[TensorRecord, ...]
    outputs: tuple[TensorRecord, ...]
    kernel_outputs: tuple[KernelRecord, ...] = ()
    cascades: tuple[str, ...] = ()
    prefix: str = "opfuse"
    quant: dict | None = None  # int8 models: the requantization's rounding

    def to_json(self) -> str:
        data: dict = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("inputs", "outputs", "kernel_outputs"):
                value = [item.to_json() for item in value]
            elif f.name == "cascades":
                value = list(value)
            elif f.name == "quant" and value is None:
                continue
            data[f.name] = value
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        return cls(
            data["source"], data["target"], bool(data["fused"]), data["planner"],
            int(data["kernels"]), int(data["arena_bytes"]),
            int(data.get("stack_scratch_bytes", 0)), int(data["weights_bytes"]),
            tuple(TensorRecord.from_json(x) for x in data["inputs"]),
            tuple(TensorRecord.from_json(x) for x in data["outputs"]),
            tuple(KernelRecord.from_json(k) for k in data.get("kernel_outputs", ())),
            tuple(data.get("cascades", ())), data.get("prefix", "opfuse"), data.get("quant"),
        )
