"""``validate_c`` (generated C vs onnxruntime on the original model) and ``bench`` (fused C,
unfused C, onnxruntime with all optimizations and with none; one thread each)."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnxruntime as ort

from opfuse.backends.c.emit import emit_c
from opfuse.compiled import CompileResult
from opfuse.frontends.registry import frontend_for
from opfuse.measure.quiet import native_stderr_silenced
from opfuse.measure.rounds import calls_per_round, sig4
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.sessions import block_timings, one_thread_session
from opfuse.measure.validate.input_ranges import describe, index_ranges
from opfuse.measure.validate.ort import (
    ValidationReport,
    compare,
    random_inputs,
    reference_session,
    run_session,
)
from opfuse.pipeline import DEFAULT_TARGET, compile_model, read, source_proto
from opfuse.safe_text import for_terminal
from opfuse.targets import Target


def _original(source: str | Path):
    proto = source_proto(source)
    if proto is None and frontend_for(source).name != "onnx":
        return read(source)  # a .tflite runs in onnxruntime as its imported proto
    return proto if proto is not None else source


def _compiled(source, target) -> CompileResult:
    return source if isinstance(source, CompileResult) else compile_model(source, target)


def reference(source: str | Path, inputs: Mapping[str, np.ndarray] | None = None, seed: int = 0,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None,
              input_values: Mapping[str, np.ndarray] | None = None):
    """(inputs, outputs by name) of onnxruntime on the original model, optimizations disabled."""
    notes: list[str] = []
    original = _original(source)
    sess = reference_session(original, "original", notes)
    if inputs is None:
        spans = index_ranges(original)
        feeds = random_inputs(sess, seed, input_shapes, ranges=spans)
        notes.extend(filter(None, [describe(spans)]))
    else:
        feeds = dict(inputs)
    feeds.update(input_values or {})  # --input-value: the original reads what the C has as constant
    names = [o.name for o in sess.get_outputs()]
    outputs = run_session(sess, feeds, f"{source}")
    return feeds, dict(zip(names, outputs, strict=True)), notes


def validate_c(
    model_source: str | Path | CompileResult,
    target: str | Target = DEFAULT_TARGET,
    *,
    fuse: bool = True,
    planner: str = "greedy-inplace",
    inputs: Mapping[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    seed: int = 0,
    outdir: Path | str | None = None,
    cascades: bool = True,
) -> ValidationReport:
    """Emit C for the model, build it, run it and compare every output with onnxruntime."""
    result = _compiled(model_source, target)
    feeds, ref, notes = reference(result.source, inputs, seed, result.input_shapes,
                                  result.input_values)
    with tempfile.TemporaryDirectory(prefix="opfuse-c-") as tmp:
        folder = Path(outdir) if outdir is not None else Path(tmp) / "model"
        emitted = emit_c(result, folder, fuse=fuse, planner=planner, cascades=cascades)
        build_shared(folder)
        got = CModel(folder).run(feeds)
    checks = tuple(
        compare(name, np.asarray(r), np.asarray(got[name]).reshape(np.shape(r)), rtol, atol)
        for name, r in ref.items()
    )
    from opfuse.measure.validate.c_int8 import c_label

    src = "given arrays" if inputs is not None else f"random (seed {seed})"
    built = c_label(result, emitted.fused, emitted.cascades)
    return ValidationReport(checks, rtol, atol, src,
                            (*notes, f"{built} vs onnxruntime on the original"))


def _ort_session(source, level) -> ort.InferenceSession:
    return one_thread_session(_original(source), level)


def bench(
    model_source: str | Path | CompileResult,
    target: str | Target = DEFAULT_TARGET,
    repeats: int = 20,
    blocks: int = 5,
    planner: str = "greedy-inplace",
    cascaded: bool = False,
) -> dict:
    """Warm latency (s) of fused C, unfused C, onnxruntime ORT_ENABLE_ALL and ORT_DISABLE_ALL,
    one thread each, in one run: ``blocks`` alternating blocks of ``repeats // blocks`` timed runs
    per runner, each block's first run dropped (opfuse.measure.sessions.block_timings); the figure is the
    median of the block medians, with the blocks' spread beside it. A run is as many back-to-back
    calls as make the fastest runner's run last ~200 us (opfuse.measure.rounds.calls_per_round;
    1 for any model slower than that): a 5 us model timed call by call is mostly the clock.

    The C variants are timed on ``opfuse_model_invoke()`` alone, the zero-copy path a deployed
    application uses: before each run the inputs are written into the arena
    (``opfuse_model_input``; untimed, as the application's producer would write them; needed
    every time since the planner may reuse input bytes in place) and the outputs stay in the
    arena. onnxruntime is timed on ``run`` with numpy feeds (it does not copy CPU inputs).

    fused C is layer by layer (``emit_c(cascades=False)``); ``cascaded``: also the default C,
    rows streamed through the partition's cascades (ring buffers),
    in the same alternating blocks, with its arena and its ratios to unfused C and ORT."""
    result = _compiled(model_source, target)
    feeds, _, _ = reference(result.source)
    per_block = max(2, repeats // max(blocks, 1))
    with tempfile.TemporaryDirectory(prefix="opfuse-bench-") as tmp:
        runners: dict[str, Callable[[], object]] = {}
        before: dict[str, Callable[[], object]] = {}
        variants = [("fused_c_s", {"cascades": False}), ("unfused_c_s", {"fuse": False})]
        if cascaded:
            variants.append(("cascaded_c_s", {}))  # what --emit c writes by default
        arenas, kernels = {}, {}
        for key, options in variants:
            folder = Path(tmp) / key
            emitted = emit_c(result, folder, planner=planner, **options)
            arenas[key], kernels[key] = emitted.arena_bytes, emitted.kernels
            model = CModel(build_shared(folder))
            bound = model.bind(feeds)
            before[key] = (lambda m=model, b=bound: m.write(b))
            runners[key] = model.invoke
        levels = (("ort_all_s", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
                  ("ort_disabled_s", ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
        for key, level in levels:
            sess = _ort_session(result.source, level)
            runners[key] = (lambda s=sess: s.run(None, feeds))
        litert = _litert_runner(result.source, feeds)
        if litert is not None:  # a .tflite: the runtime its users would pick, beside ORT
            before["litert_s"], runners["litert_s"] = litert
        calls = calls_per_round({k: (before.get(k, _nothing), fn) for k, fn in runners.items()})
        timing = block_timings(runners, blocks, per_block, before, calls)
    out: dict = {key: t.median_s for key, t in timing.items()}
    out.update({f"{key[:-2]}_spread": t.spread for key, t in timing.items()})
    out.update({
        "model": result.source,
        "target": result.target.name,
        "blocks": blocks,
        "runs_per_block": per_block,
        "calls_per_run": calls,
        "repeats": blocks * per_block,
        "fusion_speedup": out["unfused_c_s"] / out["fused_c_s"],
        "fused_c_vs_ort_all": out["fused_c_s"] / out["ort_all_s"],
        "fused_c_vs_best": out["fused_c_s"] / min(out["ort_all_s"], out.get("litert_s", math.inf)),
        "fused_arena_bytes": arenas["fused_c_s"],
        **{f"{key[:-4]}_kernels": count for key, count in kernels.items()},
    })
    if cascaded:
        out.update({
            "cascaded_arena_bytes": arenas["cascaded_c_s"],
            "cascaded_speedup": out["unfused_c_s"] / out["cascaded_c_s"],
            "cascaded_c_vs_ort_all": out["cascaded_c_s"] / out["ort_all_s"],
            "cascaded_vs_fused": out["fused_c_s"] / out["cascaded_c_s"],
        })
    return out


def _nothing() -> None:
    return None


def _litert_runner(source, feeds: Mapping[str, np.ndarray]):  # noqa: ANN001, ANN202
    """(write the inputs, invoke) of LiteRT's interpreter on a ``.tflite`` source (its default
    XNNPACK delegate, one thread), or None for another source or without ai-edge-litert."""
    if not (isinstance(source, str | Path) and str(source).endswith(".tflite")):
        return None
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    try:
        with native_stderr_silenced():
            interp = Interpreter(model_path=str(source), num_threads=1)
            interp.allocate_tensors()
    except (RuntimeError, ValueError):  # LiteRT refuses some files TFLite Micro runs
        return None
    details = interp.get_input_details()
    if len(details) != len(feeds):
        return None
    arrays = [np.asarray(a).astype(d["dtype"]).reshape(d["shape"])
              for d, a in zip(details, feeds.values(), strict=True)]

    def write() -> None:
        for d, a in zip(details, arrays, strict=True):
            interp.set_tensor(d["index"], a)

    return write, interp.invoke


def format_bench(data: dict) -> str:
    keys = ("fused_c_s", "unfused_c_s", "ort_all_s", "ort_disabled_s")
    ms = {k: sig4(data[k]) for k in keys}
    sp = {k: data.get(f"{k[:-2]}_spread", 0.0) * 100 for k in keys}
    calls = data.get("calls_per_run", 1)
    runs = f"runs of {calls} back-to-back calls" if calls > 1 else "runs"
    return (
        f"{for_terminal(data['model'])} on {for_terminal(data['target'])}: warm, one thread; median of {data['blocks']} "
        f"alternating blocks of {data['runs_per_block']} {runs} (each block's first run dropped; "
        f"times per call), spread = (slowest - fastest block median) / median of the block "
        f"medians\n"
        f"  fused C          {ms['fused_c_s']:>9} ms  spread {sp['fused_c_s']:4.1f}%\n"
        f"  unfused C        {ms['unfused_c_s']:>9} ms  spread {sp['unfused_c_s']:4.1f}%\n"
        f"  ORT_ENABLE_ALL   {ms['ort_all_s']:>9} ms  spread {sp['ort_all_s']:4.1f}%\n"
        f"  ORT_DISABLE_ALL  {ms['ort_disabled_s']:>9} ms  spread {sp['ort_disabled_s']:4.1f}%\n"
        f"  fusion speedup (unfused / fused C): {data['fusion_speedup']:.2f}x\n"
        f"  fused C / ORT_ENABLE_ALL: {data['fused_c_vs_ort_all']:.2f}x"
        + (f"\n  LiteRT (XNNPACK)  {sig4(data['litert_s']):>8} ms  spread "
           f"{data.get('litert_spread', 0.0) * 100:4.1f}%\n"
           f"  fused C / the faster of ORT_ENABLE_ALL and LiteRT: {data['fused_c_vs_best']:.2f}x"
           if "litert_s" in data else "")
    )
