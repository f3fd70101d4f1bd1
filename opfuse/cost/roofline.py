"""``cost_model``: bytes, FLOPs, arithmetic intensity, roofline time and energy per kernel.

Traffic (docs/architecture.md, "Traffic accounting"): a kernel reads its external activation inputs and its
weights (the initializers among ``Kernel.inputs``) and writes its outputs; a value that stays inside
a kernel costs nothing. A value read twice by one kernel is read once.

Level model (kept simple on purpose): every activation byte is served by one memory level and every
weight byte by another. Activations live in the innermost activation level at least as large as
the arena (the planned arena when the caller gives one, else the arena's lower bound: the largest
sum of tensors live at one step); if no level is that large, the outermost activation level. An
arena that fits a cache is assumed to stay there. Weights, for repeated inference (every run reads
every weight once, so what stays resident between runs is the whole set): the innermost level that
holds weights and is at least as large as all the model's weights, plus the arena when that level
holds activations too (they share it); else the outermost weight level. So on a CPU whose last-level
cache says ``holds = ["activations", "weights"]`` a model whose weights and arena fit it reads its
weights at cache bandwidth (mobilenet_v2 fp32, 14 MB, in a 32 MB L3) and one that does not reads
them from DRAM (resnet18 fp32, 45 MB), all of them: no partial residency. An MCU's flash is its
only weight level (TFLite Micro reads weights in place), so nothing changes there. No per-tensor
placement, no cache misses.

Roofline (docs/architecture.md, "Roofline"): compute time = FLOPs / (2 x peak MAC/s at the precision x
efficiency[class]), where efficiency is the target's attainable fraction of peak for the kernel's
class (``[perf.efficiency]``; 1.0 where the table or the class is absent; classes in
``opfuse.cost.kclass``: the anchor's, else the first op's). A depthwise conv or a pool cannot use
the GEMM datapath the peak is quoted for; the efficiency says how much of it the target's kernels
reach (measured on the host by ``opfuse calibrate``). Memory time = sum over levels of bytes read /
read bandwidth + bytes written / write bandwidth; latency = max of the two + the target's dispatch
overhead. The ridge point is the attainable FLOP/s (peak x efficiency) over the kernel's effective
bandwidth (its bytes / its memory time), so "memory"-bound (intensity below the ridge) is the same
statement as memory time > compute time. Energy = bytes x pJ/byte of their level + MACs x pJ/MAC at
the precision (elementwise FLOPs carry no compute energy, per the design; efficiency changes time,
not energy).

A target with ``[perf.npu]`` (a block-granular NPU, ``opfuse.cost.npu``) replaces FLOPs / peak by
its block model's cycles / clock, reads its weights as the NPU stores them (encoded), costs a view
(Reshape, boundary Transpose) nothing, and pays the dispatch overhead once per NPU operation the
kernel becomes (a lowered SOFTMAX: many).

Cascades (``Kernel.members``): the members run one after the other on every band, so the compute
time is the sum of each member's FLOPs at its own class's efficiency (a depthwise member stays as
slow as it was); the kernel's class is its first member's. Its intermediates are ring buffers that
never leave the kernel: they cost no traffic, like any value kept inside a kernel. Weights are read
once per inference, as for any kernel (an MCU reads them in place from flash on every use anyway,
and a CPU's rings and a block's weights stay in its caches across bands); row streaming computes
every row once, so MACs and FLOPs are the members' sums (no recompute). One dispatch per cascade.

Precision sets the bytes per element of floating-point activations and weights (integer tensors,
such as shapes and indices, keep their own size) and the peak rate used. A quantized model
(docs/architecture.md, "int8 in the IR") is costed at its own dtypes and its int8 rate; on a
target with ``[perf.int8c]`` (the calibrated ``host``) its compute time is that of opfuse's own int8
C instead (``opfuse.cost.int8c``: work as the C templates loop, per-class rates, a C call's
dispatch), since that C, not onnxruntime, is what runs it there. Likewise a float model at fp32
on a target with ``[perf.floatc]`` (the Cortex-M targets) is costed as opfuse's own float C
(``opfuse.cost.floatc``: work per path of the float conv plan, ``opfuse.kernelplan.convf``, at
rates fitted to QEMU's instruction counts); a cascade's members are summed, each a member's plan.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse import ops
from opfuse.cost import floatc as floatc_cost
from opfuse.cost import int8c as int8c_cost
from opfuse.cost import npu as npu_cost
from opfuse.cost.cwork import is_view
from opfuse.cost.kclass import kernel_class
from opfuse.cost.precision import element_bytes, require_perf, resolve_precision
from opfuse.cost.types import CostSide, KernelCost
from opfuse.memory import arena_lower_bound
from opfuse.memory.lifetimes import ring_bytes, value_bytes
from opfuse.quant import is_quantized
from opfuse.schedule import Kernel, Partition
from opfuse.targets import MemoryLevel, Perf, Target


def cost_model(
    model: ir.Model,
    partition: Partition,
    target: Target,
    precision: str | None = None,
    activations_only: bool = False,
    arena_bytes: int | None = None,
) -> CostSide:
    """Costs of ``partition``'s kernels of ``model`` on ``target`` (see the module docstring)."""
    perf = require_perf(target)
    prec = resolve_precision(model, target, None if is_quantized(model) else precision)
    bpe = element_bytes(model, prec)
    if arena_bytes is None:
        arena_bytes = arena_lower_bound(model, partition, bpe)
    act_level = perf.activation_level(arena_bytes)
    values = values_by_name(model)
    initializers = set(model.graph.initializers)
    used = {n for k in partition.kernels for n in k.inputs if n in initializers}
    w_level = perf.weight_level(names_bytes(tuple(sorted(used)), values, bpe), arena_bytes)
    nodes = {n.name: n for n in model.graph}
    own_c = perf.int8c is not None and prec == "int8" and is_quantized(model)
    # opfuse's own float C ([perf.floatc]): the FPU's kind picks the float conv plan's paths
    own_float = (perf.floatc is not None and prec == "fp32" and not is_quantized(model)
                 and perf.npu is None)
    gemv = own_c and int8c_cost.runs_gemv(model, target)
    dw = own_c and int8c_cost.runs_dw(model, target)
    kernels = tuple(
        _kernel_cost(
            k, nodes, values, initializers, perf, prec, bpe, activations_only, act_level, w_level,
            own_c, target.isa.scalar if own_float else None, target.isa.depthwise_rows,
            gemv, dw,
        )
        for k in partition.kernels
    )
    return CostSide(
        target=target.name,
        precision=prec,
        activations_only=activations_only,
        arena_bytes=arena_bytes,
        activation_level=act_level.name,
        weight_level=w_level.name,
        kernels=kernels,
    )


def values_by_name(model: ir.Model) -> dict[str, ir.Value]:
    graph = model.graph
    found: dict[str, ir.Value] = {v.name: v for v in graph.inputs if v.name}
    found.update({name: v for name, v in graph.initializers.items()})
    for node in graph:
        for out in node.outputs:
            if out is not None and out.name:
                found[out.name] = out
    return found


def names_bytes(names: tuple[str, ...], values: dict[str, ir.Value], bpe: int) -> int:
    return sum(value_bytes(values[n], bpe) for n in dict.fromkeys(names) if n in values)


def _kernel_cost(
    kernel: Kernel,
    nodes: dict[str, ir.Node],
    values: dict[str, ir.Value],
    initializers: set[str],
    perf: Perf,
    precision: str,
    bpe: int,
    activations_only: bool,
    act_level: MemoryLevel,
    w_level: MemoryLevel,
    own_c: bool = False,
    own_float: bool | None = None,  # [perf.floatc] prices it; True: on a scalar FPU
    depthwise_rows: bool = False,  # the ISA's depthwise rows in vectors (Isa.depthwise_rows)
    gemv: bool = False,  # the ISA writes batch-1 int8 fully connected layers as the GEMV
    dw: bool = False,  # the ISA writes int8 depthwise convs in vectors of pixels (runs_dw)
) -> KernelCost:
    members = [nodes[n] for n in kernel.nodes if n in nodes]
    flops = sum(ops.flops(n) for n in members)
    macs = sum(ops.macs(n) for n in members)
    act_in = tuple(n for n in kernel.inputs if n not in initializers)
    weights = tuple(n for n in kernel.inputs if n in initializers)
    act_read = names_bytes(act_in, values, bpe)
    w_read = 0 if activations_only else names_bytes(weights, values, bpe)
    written = names_bytes(kernel.outputs, values, bpe)
    npu = perf.npu
    dispatches = 1
    dispatch_s = perf.dispatch_overhead_s
    if npu is not None:  # a block-granular NPU (opfuse.cost.npu): views are free, weights encoded
        dispatches = npu_cost.passes(members, npu)
        if dispatches == 0:  # a view: nothing moves (its shape operand is not read either)
            act_read = written = 0
        elif not activations_only:
            w_read = sum(npu_cost.encoded_bytes(values[n], names_bytes((n,), values, bpe), npu)
                         for n in dict.fromkeys(weights) if n in values)

    memory_s = act_read / act_level.read_bytes_per_s + written / act_level.write_bytes_per_s
    memory_s += w_read / w_level.read_bytes_per_s
    klass = kernel_class(members)
    efficiency = perf.efficiency_of(klass)
    peak_flops = 2.0 * perf.peak_macs_per_s[precision] * efficiency  # attainable for this class
    compute_s = flops / peak_flops
    if npu is not None:
        compute_s = npu_cost.kernel_cycles(members, npu) / perf.clock_hz
        peak_flops = flops / compute_s if compute_s > 0 and flops else peak_flops
        # the fraction of peak the block model gives this kernel, reported as its efficiency
        efficiency = min(1.0, peak_flops / (2.0 * perf.peak_macs_per_s[precision]))
    elif own_c:  # opfuse's own int8 C, as [perf.int8c] prices it (opfuse.cost.int8c)
        assert perf.int8c is not None
        dispatch_s = perf.int8c.dispatch_overhead_s
        if is_view(members):  # the C's memory plan puts a view on its input: nothing moves
            memory_s = 0.0
        parts = [[nodes[n] for n in m.nodes if n in nodes] for m in kernel.members] or [members]
        # a cascade's members compute a row a call in the portable C: no depthwise vectors
        compute_s = sum(int8c_cost.compute_s(part, perf, gemv, dw and not kernel.members)
                        for part in parts)
        peak_flops = flops / compute_s if compute_s > 0 and flops else peak_flops
        efficiency = min(1.0, peak_flops / (2.0 * perf.peak_macs_per_s[precision]))
    elif own_float is not None:  # opfuse's own float C, as [perf.floatc] prices it (cost.floatc)
        assert perf.floatc is not None
        dispatch_s = perf.floatc.dispatch_overhead_s
        if is_view(members):  # the C's memory plan puts a view on its input: nothing moves
            memory_s = 0.0
        if kernel.is_cascade:
            compute_s = sum(floatc_cost.compute_s([nodes[n] for n in m.nodes if n in nodes],
                                                  perf, own_float, member=True,
                                                  rows=depthwise_rows)
                            for m in kernel.members)
        else:
            compute_s = floatc_cost.compute_s(members, perf, own_float, rows=depthwise_rows)
        peak_flops = flops / compute_s if compute_s > 0 and flops else peak_flops
        efficiency = min(1.0, peak_flops / (2.0 * perf.peak_macs_per_s[precision]))
    elif kernel.is_cascade:  # each member at its own class's efficiency (module docstring)
        compute_s = sum(
            sum(ops.flops(n) for n in part)
            / (2.0 * perf.peak_macs_per_s[precision] * perf.efficiency_of(kernel_class(part)))
            for part in ([nodes[n] for n in m.nodes if n in nodes] for m in kernel.members)
        )
        peak_flops = flops / compute_s if compute_s else peak_flops
        efficiency = peak_flops / (2.0 * perf.peak_macs_per_s[precision])
    traffic = act_read + w_read + written
    intensity = flops / traffic if traffic else math.inf
    ridge = peak_flops * memory_s / traffic if traffic else 0.0
    bound = "memory" if intensity < ridge else "compute"

    by_level: dict[str, int] = {act_level.name: act_read + written}
    by_level[w_level.name] = by_level.get(w_level.name, 0) + w_read
    pj = (act_read + written) * act_level.pj_per_byte + w_read * w_level.pj_per_byte
    pj += macs * perf.pj_per_mac[precision]
    return KernelCost(
        name=kernel.name,
        ops=kernel.ops,
        nodes=kernel.nodes,
        flops=flops,
        macs=macs,
        activation_bytes_read=act_read,
        weight_bytes_read=w_read,
        bytes_read=act_read + w_read,
        bytes_written=written,
        arithmetic_intensity=intensity,
        ridge_point=ridge,
        bound=bound,
        compute_s=compute_s,
        memory_s=memory_s,
        latency_s=max(compute_s, memory_s) + dispatches * dispatch_s,
        energy_j=pj * 1e-12,
        bytes_by_level=tuple(by_level.items()),
        kernel_class=klass,
        efficiency=efficiency,
        members=tuple(m.name for m in kernel.members),
        band_rows=kernel.band_rows,
        ring_buffer_bytes=sum(
            ring_bytes(r, values[r.value], bpe) for r in kernel.ring_buffers if r.value in values
        ),
    )
