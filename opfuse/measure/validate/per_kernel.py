"""``validate --backend c --per-kernel``: every kernel's output against a reference, not only the
graph's, and the first kernel (in schedule order) whose output diverges.

The C side is a debug build of the generated model (``-DOPFUSE_DEBUG_DUMP``, never the deployable
one): the schedule hands each kernel output to a hook right after the kernel ran, before a later
kernel may reuse its arena bytes, and the hook copies it out. The reference side:

- float models: onnxruntime (optimizations off) on the model the C follows (the canonicalized
  model, ``compile --emit onnx``), with every kernel output added as a graph output, each kernel
  isolated as below: float rounding compounds over a deep network too (MediaPipe's
  pose_landmark_full: every kernel within 1.1e-5 of max|reference| on onnxruntime's inputs, the
  chained outputs 1.8e-3 apart by kernel 89 of 112), and isolated, a kernel that computes
  something else is the one that fails; the graph's final outputs are also checked against the
  original by plain ``validate``;
- quantized ONNX (``onnx`` rounding): onnxruntime (optimizations off) on the canonicalized QDQ
  model with its Conv/Gemm/MatMul groups summed in integers (integer_reference.py, what
  ``validate`` judges), every kernel output exposed, and each kernel *isolated*: after the comparison the hook
  writes the reference's values into the kernel's output, so the next kernel reads exactly the
  reference's inputs (the layer-wise mode of TFLite's quantization debugger). Whole-model
  differences compound: one float rounding difference in a LayerNorm flips a tie in the next
  QuantizeLinear, and the flip travels through every later layer. Isolated, each kernel answers for
  itself: an int8 output passes within one quantization step, a float one within atol + rtol;
- TFLite int8 models: the unfused int8 C (one kernel per node; every value a fused kernel writes is
  a value it writes too). That localizes a fusion fault, not a fault shared by both builds.
  TFLite Micro's interpreter can keep its intermediates (``InterpreterConfig.kPreserveAllTensors``
  and ``GetTensor``), but mapping its tensor indices onto the IR's values is not done yet.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from opfuse.backends.c.emit import c_schedule, emit_c
from opfuse.backends.c.manifest import Manifest
from opfuse.compiled import CompileResult
from opfuse.errors import OpfuseError
from opfuse.measure.run.host import CModel, build_shared, manifest
from opfuse.measure.validate.ort import OutputCheck, compare
from opfuse.quant import ONNX
from opfuse.safe_text import for_terminal

DEBUG_LIB = "libopfuse_debug"
_builds = itertools.count()
_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_NP = {"float": np.float32, "int8_t": np.int8, "uint8_t": np.uint8, "int32_t": np.int32,
       "int64_t": np.int64}


@dataclass(frozen=True)
class KernelCheck:
    index: int
    function: str
    ops: tuple[str, ...]
    nodes: tuple[str, ...]
    outputs: tuple[OutputCheck, ...]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def max_abs_err(self) -> float:
        return max((o.max_abs_err for o in self.outputs), default=0.0)

    @property
    def max_rel_err(self) -> float:
        return max((o.max_rel_err for o in self.outputs), default=0.0)


@dataclass(frozen=True)
class PerKernelReport:
    kernels: tuple[KernelCheck, ...]
    reference: str  # what the kernel outputs were compared with
    rtol: float
    atol: float
    isolated: bool = False  # each kernel was fed the reference's inputs (float, quantized ONNX)
    in_steps: bool = False  # int8 outputs were compared in quantization steps

    @property
    def first_divergent(self) -> KernelCheck | None:
        return next((k for k in self.kernels if not k.ok), None)

    @property
    def ok(self) -> bool:
        return self.first_divergent is None


def dump_kernels(folder: Path | str, feeds: Mapping[str, np.ndarray],
                 isolate: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Build ``folder``'s C as a debug library and run it once: every kernel output by name. With
    ``isolate``, each output that has a reference there of its dtype and size is overwritten by it
    once copied out, so every later kernel reads the reference's values."""
    folder = Path(folder)
    info = manifest(folder)
    # a fresh file name per build: dlopen hands back an already loaded library of the same path
    name = f"{DEBUG_LIB}.{os.getpid()}.{next(_builds)}.so"
    flag = f"-D{info.prefix.upper()}_DEBUG_DUMP"
    lib = build_shared(folder, extra=("-march=native", flag), name=name)
    model = CModel(lib)
    entries = {k.index: k for k in info.kernel_outputs}
    got: dict[str, np.ndarray] = {}

    def hook(kernel: int, output: int, data: int) -> None:
        item = entries[kernel].outputs[output]
        dtype = np.dtype(_NP[item.ctype])
        size = math.prod(item.shape)
        buf = (ctypes.c_char * (size * dtype.itemsize)).from_address(data)
        got[item.name] = np.frombuffer(buf, dtype=dtype).reshape(item.shape).copy()
        ref = None if isolate is None else isolate.get(item.name)
        if ref is not None and ref.dtype == dtype and ref.size == size:
            ctypes.memmove(data, np.ascontiguousarray(ref).tobytes(), size * dtype.itemsize)

    callback = _HOOK(hook)  # kept alive for the run below
    slot = ctypes.c_void_p.in_dll(model.lib, f"{model.prefix}_debug_hook")
    slot.value = ctypes.cast(callback, ctypes.c_void_p).value
    try:
        model.run(feeds)
    finally:
        slot.value = None
    return got


def _ort_intermediates(result: CompileResult, fuse: bool, names: list[str],
                       feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime on the model the C follows, every name in ``names`` exposed as an output."""
    from opfuse.backends.onnx.emit import emit_onnx

    sched = c_schedule(result, fuse, cascades=False)  # the debug dump is per layer-by-layer kernel
    model, part = sched.model, sched.partition
    proto = emit_onnx(model, part)
    if model.meta.get("opfuse.rounding") == ONNX:  # the reference validate judges (c_int8.py)
        from opfuse.measure.validate.integer_reference import integer_reference

        proto = integer_reference(proto, frozenset(names)).proto
    have = {o.name for o in proto.graph.output}
    for name in names:
        if name not in have:
            proto.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    wanted = [i.name for i in sess.get_inputs()]
    out = sess.run(names, {k: feeds[k] for k in wanted})
    return dict(zip(names, out, strict=True))


def per_kernel(
    result: CompileResult,
    folder: Path | str,
    feeds: Mapping[str, np.ndarray] | None = None,
    *,
    fuse: bool = True,
    emit: bool = True,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    seed: int = 0,
) -> PerKernelReport:
    """Every kernel output of the C in ``folder`` (emitted there first unless ``emit`` is False,
    e.g. when a test edited it) against the reference of the module docstring."""
    from opfuse.backends.c.int8.requant import is_quantized

    folder = Path(folder)
    if emit:
        emit_c(result, folder, fuse=fuse, cascades=False)
    info = manifest(folder)
    entries = info.kernel_outputs
    if entries is None:
        raise OpfuseError(f"{folder}: model.json has no kernel_outputs (emitted by an older opfuse)")
    if feeds is None:
        feeds = random_feeds(info, seed)
    names = [o.name for k in entries for o in k.outputs]
    steps: set[str] = set()  # int8 outputs compared in quantization steps
    isolated = is_quantized(result.optimized) and result.optimized.meta.get("opfuse.rounding") == ONNX
    if isolated:
        ref = _ort_intermediates(result, fuse, names, feeds)
        got = dump_kernels(folder, feeds, isolate=ref)
        steps = {n for n, v in ref.items() if np.asarray(v).dtype.kind in "iu" and np.asarray(v).itemsize == 1}
        source = ("onnxruntime (optimizations off) on the canonicalized QDQ model, its "
                  "Conv/Gemm/MatMul groups summed in integers as QLinearConv, each kernel fed "
                  "the reference's inputs; int8 outputs pass within 1 quantization step")
    elif is_quantized(result.optimized):
        got = dump_kernels(folder, feeds)
        if not fuse:
            raise OpfuseError("--per-kernel on int8 compares the fused C with the unfused C: "
                              "run it on the fused build")
        emit_c(result, folder.parent / (folder.name + "-unfused"), fuse=False)
        ref = dump_kernels(folder.parent / (folder.name + "-unfused"), feeds)
        source = "the unfused int8 C (one kernel per node), not TFLite Micro"
    else:  # float: isolated too, so a kernel's error is its own, not what reached its inputs
        ref = _ort_intermediates(result, fuse, names, feeds)
        got = dump_kernels(folder, feeds, isolate=ref)
        isolated = True
        source = ("onnxruntime on the canonicalized model, every kernel output exposed, each "
                  "kernel fed the reference's inputs")
    checks = []
    for entry in entries:
        outs = []
        for item in entry.outputs:
            if item.name not in ref or item.name not in got:
                continue
            r = np.asarray(ref[item.name])
            if r.dtype != got[item.name].dtype:
                continue  # a float value the reference keeps where the C writes its clamped int8
            tol = (0.0, 1.0) if item.name in steps else (rtol, atol)
            outs.append(compare(item.name, r, got[item.name].reshape(r.shape), *tol))
        checks.append(KernelCheck(entry.index, entry.function, tuple(entry.ops),
                                  tuple(entry.nodes), tuple(outs)))
    return PerKernelReport(tuple(checks), source, rtol, atol, isolated=isolated,
                           in_steps=bool(steps))


def random_feeds(info: Manifest, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs of the manifest's shapes: normals for float, the full range for int8."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for item in info.inputs:
        dtype = np.dtype(_NP[item.ctype])
        if dtype.kind == "f":
            feeds[item.name] = rng.standard_normal(item.shape).astype(dtype)
        elif dtype.itemsize > 1:  # int32/int64 are indices: small, as validate draws them
            feeds[item.name] = rng.integers(0, 10, item.shape).astype(dtype)
        else:
            lim = np.iinfo(dtype)
            feeds[item.name] = rng.integers(lim.min, lim.max + 1, item.shape).astype(dtype)
    return feeds


def format_per_kernel(report: PerKernelReport) -> str:
    """The per-kernel error table and the first divergence."""
    rows = [f"{'#':>4}  {'kernel':<40} {'max abs err':>11} {'max rel err':>11}  ok"]
    for k in report.kernels:
        label = for_terminal(k.function + " [" + " + ".join(k.ops) + "]")[:40]
        rows.append(f"{k.index:>4}  {label:<40} {k.max_abs_err:11.3e} {k.max_rel_err:11.3e}  "
                    f"{'yes' if k.ok else 'NO'}")
    rows.append(f"reference: {report.reference}; a kernel passes when every output's max abs err "
                f"<= atol + rtol * max|reference| (atol={report.atol}, rtol={report.rtol})")
    first = report.first_divergent
    if first is None:
        rows.append(f"per-kernel: all {len(report.kernels)} kernels match")
    else:
        worst = max(first.outputs, key=lambda o: o.max_abs_err)
        rows.append(
            f"first divergence: kernel {first.index} {first.function} "
            f"({for_terminal(' + '.join(first.ops))}; nodes {for_terminal(', '.join(first.nodes))}): "
            f"output '{for_terminal(worst.name)}' "
            f"max abs err {worst.max_abs_err:.3e} (tolerance {worst.tolerance:.3e})")
    return "\n".join(rows)
