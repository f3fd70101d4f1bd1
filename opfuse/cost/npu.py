"""Block-granular compute cycles of a microNPU (a target's ``[perf.npu]``, ``opfuse.targets.npu``).

A roofline at one MAC rate treats every MAC alike; an Ethos-U style NPU does not. It computes an
output micro-block (``ofm_ublock``: height x width x channels) per step, and a step consumes a
fixed slice of input channels and kernel elements, so a layer costs its work rounded up to those
granules (docs/architecture.md, cost stage). Per node (NCHW shapes of the IR):

- dense Conv (1x1 too) and Gemm: ``steps = min(K x ceil(Ci / ifm_depth_step),
  ceil(K / kernel_elements_per_step) x ceil(Ci / partkernel_depth_step))`` (the compiler picks the
  cheaper traversal: 32 channels of one kernel element, or 8 channels of 4 kernel elements);
  ``cycles = max(weight_cycles_per_ublock, cycles_per_step x xy) x steps x z`` with ``xy`` the
  micro-blocks over the output plane and ``z`` over output channels. A 1-channel input conv runs at
  1/8 of peak; a fully-connected layer (one output pixel) waits on its weights every step;
- depthwise Conv: ``max(weight_cycles_per_ublock, cycles_per_step x xy) x ceil(K / 4) x z``;
- MaxPool/AveragePool (and global pools/Mean as one window): ``max(4, K) x xy x z``;
- every node also has an output stage, ``output elements x output_cycles_per_element[op]`` (the
  largest over a kernel's members: a sigmoid epilogue is slower than a ReLU); the kernel's compute
  time is the larger of the two, as the NPU overlaps them;
- an op in ``lowered_ops`` (SOFTMAX) runs as that many elementwise NPU operations over its output.

Weights, when ``weight_compression = "entropy"``, are stored encoded: an int8 weight tensor costs
its Shannon entropy (bits per value of its histogram) instead of 8 bits, and an int32 bias becomes
10 bytes per output channel (the compiler's packed bias and requantization scale).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from opfuse.ir.values import static_dims
from opfuse.ops import groups
from opfuse.targets.npu import NpuModel

# Movement an NPU compiler resolves in addresses, not as an operation (a view, or a write into the
# slice of the concatenation; the IR's layout transposes at the boundary do not exist in NHWC).
FREE_OPS = groups.NPU_FREE
_POOLS = groups.POOLS
_GLOBAL = groups.GLOBAL_POOLS | groups.POOL_REDUCES


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _plane(out: list[int], npu: NpuModel) -> tuple[int, int]:
    """(micro-blocks over the output plane, output channels) of an NCHW/NC output."""
    uh, uw, _ = npu.ofm_ublock
    channels = out[1] if len(out) > 1 else 1
    h = out[2] if len(out) > 2 else (out[0] if len(out) == 2 else 1)
    w = int(np.prod(out[3:])) if len(out) > 3 else 1
    return _cdiv(h, uh) * _cdiv(w, uw), channels


def _dense(npu: NpuModel, xy: int, co: int, ci: int, k: int) -> float:
    steps = min(k * _cdiv(ci, npu.ifm_depth_step),
                _cdiv(k, npu.kernel_elements_per_step) * _cdiv(ci, npu.partkernel_depth_step))
    per = max(npu.weight_cycles_per_ublock, npu.cycles_per_step * xy)
    return per * steps * _cdiv(co, npu.ofm_ublock[2])


def mac_cycles(node: ir.Node, npu: NpuModel) -> float:
    """The MAC (DPU) cycles of one node; 0 for a node without a MAC stage."""
    op = node.op_type
    out = static_dims(node.outputs[0]) if node.outputs else None
    if out is None:
        return 0.0
    xy, co = _plane(out, npu)
    if op == "Conv":
        w = static_dims(node.inputs[1]) if len(node.inputs) > 1 else None
        if w is None or len(w) < 3:
            return 0.0
        k = int(np.prod(w[2:]))
        group_attr = node.attributes.get("group")
        group = group_attr.as_int() if group_attr is not None else 1
        if group > 1 and w[1] == 1:
            per = max(npu.weight_cycles_per_ublock, npu.cycles_per_step * xy)
            return per * _cdiv(k, npu.kernel_elements_per_step) * _cdiv(co, npu.ofm_ublock[2])
        return group * _dense(npu, xy, co // group, w[1], k)
    if op in groups.MATRIX:
        a = static_dims(node.inputs[0])
        if a is None:
            return 0.0
        ci = a[-1]
        if op == "Gemm":
            trans = node.attributes.get("transA")
            ci = a[0] if trans is not None and trans.as_int() else a[-1]
        rows = int(np.prod(out[:-1])) if len(out) > 1 else 1
        return _dense(npu, _cdiv(rows, npu.ofm_ublock[0]), out[-1], ci, 1)
    if op in _POOLS:
        kernel = node.attributes.get("kernel_shape")
        k = int(np.prod(kernel.as_ints())) if kernel is not None else 1
        return max(4, k) * xy * _cdiv(co, npu.ofm_ublock[2])
    if op in _GLOBAL:
        x = static_dims(node.inputs[0])
        k = int(np.prod(x[2:])) if x is not None and len(x) > 2 else 1
        return max(4, k) * xy * _cdiv(co, npu.ofm_ublock[2])
    return 0.0


def _elements(node: ir.Node) -> int:
    out = static_dims(node.outputs[0]) if node.outputs else None
    return int(np.prod(out)) if out is not None else 0


def kernel_cycles(members: list[ir.Node], npu: NpuModel) -> float:
    """Compute cycles of a fused kernel: its MAC stage against its output stage (module docstring)."""
    if not members or passes(members, npu) == 0:
        return 0.0
    macs = sum(mac_cycles(n, npu) for n in members)
    last = members[-1]
    rate = max(npu.output_cycles(n.op_type) for n in members)
    output = _elements(last) * rate
    lowered = max(npu.lowered_ops.get(n.op_type, 1) for n in members)
    return max(macs, output * lowered)


def passes(members: list[ir.Node], npu: NpuModel) -> int:
    """NPU operations the kernel becomes: 0 for free movement, more for a lowered op."""
    if all(n.op_type in FREE_OPS for n in members):
        return 0
    return max(npu.lowered_ops.get(n.op_type, 1) for n in members)


def encoded_bytes(value: ir.Value, raw_bytes: int, npu: NpuModel) -> int:
    """Bytes of a weight as the NPU stores it (module docstring)."""
    if npu.weight_compression != "entropy" or value.const_value is None:
        return raw_bytes
    data = value.const_value.numpy()
    if data.dtype == np.int32:  # a per-channel bias: packed with its scale, 10 bytes a channel
        return 10 * data.size if data.ndim <= 1 else raw_bytes
    if data.dtype not in (np.int8, np.uint8) or data.size == 0:
        return raw_bytes
    counts = np.bincount(data.reshape(-1).view(np.uint8))
    p = counts[counts > 0] / data.size
    bits = float(-(p * np.log2(p)).sum())
    return max(1, math.ceil(bits * data.size / 8))
