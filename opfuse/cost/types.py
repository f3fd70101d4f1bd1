"""The cost model's frozen results: one KernelCost per kernel, a CostSide per schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelCost:
    name: str
    ops: tuple[str, ...]
    nodes: tuple[str, ...]
    flops: int
    macs: int
    activation_bytes_read: int  # external activation inputs
    weight_bytes_read: int  # initializers among the kernel's inputs (0 with activations_only)
    bytes_read: int  # activation_bytes_read + weight_bytes_read
    bytes_written: int  # the kernel's outputs
    arithmetic_intensity: float  # FLOPs / (bytes_read + bytes_written); inf if no bytes move
    ridge_point: float  # peak FLOP/s / this kernel's effective bandwidth (FLOPs per byte)
    bound: str  # "memory" (intensity below the ridge point) or "compute"
    compute_s: float  # FLOPs / (peak FLOP/s x efficiency)
    memory_s: float  # sum over levels of bytes / bandwidth
    latency_s: float  # max(compute_s, memory_s) + dispatch overhead
    energy_j: float  # bytes x pJ/byte per level + MACs x pJ/MAC
    bytes_by_level: tuple[tuple[str, int], ...]  # (level name, bytes read + written there)
    kernel_class: str = "other"  # opfuse.cost.kclass: the anchor's class, else the first op's
    efficiency: float = 1.0  # the target's attainable fraction of peak for that class
    members: tuple[str, ...] = ()  # a cascade's member kernels, in order (empty otherwise)
    band_rows: int = 0  # a cascade's output rows per band (0 otherwise)
    ring_buffer_bytes: int = 0  # a cascade's ring buffers at the analysed precision

    @property
    def traffic_bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def executed_s(self) -> float:
        """The latency without the memory term's excess: compute + dispatch, what the core's
        instructions take (an emulator that counts instructions models no flash wait states; a
        kernel the part's memory bounds, an M55's Gemm streaming weights from xSPI flash, is
        priced by ``latency_s`` but executes ``executed_s``)."""
        return self.latency_s - max(self.compute_s, self.memory_s) + self.compute_s

    def to_json(self) -> dict:
        intensity = self.arithmetic_intensity
        return {
            "name": self.name,
            "ops": list(self.ops),
            "nodes": list(self.nodes),
            "flops": self.flops,
            "macs": self.macs,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "arithmetic_intensity": None if math.isinf(intensity) else intensity,
            "bound": self.bound,
            "latency_s": self.latency_s,
            "energy_j": self.energy_j,
            "kernel_class": self.kernel_class,
            "efficiency": self.efficiency,
            "members": list(self.members),
            "band_rows": self.band_rows,
            "ring_buffer_bytes": self.ring_buffer_bytes,
        }


@dataclass(frozen=True)
class CostSide:
    """Costs of one schedule (a partition of a model) on one target at one precision."""

    target: str
    precision: str
    activations_only: bool
    arena_bytes: int  # the arena size used to place activations in a memory level
    activation_level: str  # the memory level activations live in
    weight_level: str
    kernels: tuple[KernelCost, ...]

    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    @property
    def activation_bytes(self) -> int:
        return sum(k.activation_bytes_read + k.bytes_written for k in self.kernels)

    @property
    def weight_bytes(self) -> int:
        return sum(k.weight_bytes_read for k in self.kernels)

    @property
    def traffic_bytes(self) -> int:
        return self.activation_bytes + self.weight_bytes

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels)

    @property
    def macs(self) -> int:
        return sum(k.macs for k in self.kernels)

    @property
    def latency_s(self) -> float:
        return sum(k.latency_s for k in self.kernels)

    @property
    def energy_j(self) -> float:
        return sum(k.energy_j for k in self.kernels)

    def totals_json(self) -> dict:
        return {
            "kernels": self.kernel_count,
            "activation_bytes": self.activation_bytes,
            "weight_bytes": self.weight_bytes,
            "traffic_bytes": self.traffic_bytes,
            "flops": self.flops,
            "macs": self.macs,
            "latency_s": self.latency_s,
            "energy_j": self.energy_j,
        }
