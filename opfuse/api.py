"""The public Python API, mirroring the CLI: load, compile, fuse, analyze, emit, save, validate.

    import opfuse
    result = opfuse.compile("mobilenet_v2", target="cortex-m7")
    print(opfuse.analyze(result, precision="int8").to_json()["after"])
    for kernel in result.partition.kernels: ...
    proto = opfuse.emit(result)
    opfuse.save(proto, "out.onnx")
    print(opfuse.validate("mobilenet_v2", proto).ok)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from opfuse import models
from opfuse.analysis import DEFAULT_PLANNER, Analysis, analyze
from opfuse.backends.onnx import emit_onnx, save_model
from opfuse.compiled import CompileResult
from opfuse.frontends import parse_input_shapes
from opfuse.frontends.limits import Limits, using_limits
from opfuse.frontends.registry import frontend_for
from opfuse.fusion import Partition
from opfuse.ir.provenance import source_map
from opfuse.measure.validate.ort import ValidationReport
from opfuse.measure.validate.ort import validate as _validate
from opfuse.pipeline import DEFAULT_TARGET, compile_model, gc_paused, source_proto
from opfuse.pipeline import load as _load
from opfuse.targets import Target, list_targets, load_target

__all__ = [
    "DEFAULT_TARGET",
    "Analysis",
    "analyze",
    "bench",
    "CompileResult",
    "compile",
    "emit",
    "emit_c",
    "emulate_c",
    "fuse",
    "fusion_json",
    "get_target",
    "Limits",
    "list_models",
    "list_targets",
    "load",
    "read_inputs",
    "save",
    "using_limits",
    "validate",
    "validate_c",
]

ShapeArg = Mapping[str, Iterable[int]] | Iterable[str] | None
# --input-value: NAME=VALUE items, or {name: value} (a number, a list, an array)
ValueArg = Mapping[str, object] | Iterable[str] | None


def _shapes(input_shape: ShapeArg) -> dict[str, tuple[int, ...]]:
    if input_shape is None:
        return {}
    if isinstance(input_shape, Mapping):
        return {k: tuple(int(d) for d in v) for k, v in input_shape.items()}
    return parse_input_shapes(list(input_shape))


def load(source: str | Path, input_shape: ShapeArg = None,
         input_value: ValueArg = None) -> ir.Model:
    """Import a model file or built-in name: static shapes, unique node names, constants folded."""
    return _load(source, _shapes(input_shape), input_value)


def compile(
    source: str | Path, target: str | Target = DEFAULT_TARGET, input_shape: ShapeArg = None,
    limits: Limits | None = None, input_value: ValueArg = None,
) -> CompileResult:
    """Import, canonicalize and partition for a target; ``limits`` raises (or lowers) the sizes
    a model may ask for (opfuse/frontends/limits.py; default: the current ones); ``input_value``
    binds graph inputs to constants so the Ifs they decide fold."""
    with using_limits(limits):
        return compile_model(source, target, _shapes(input_shape), input_value)


def fuse(
    source: str | Path, target: str | Target = DEFAULT_TARGET, input_shape: ShapeArg = None,
    input_value: ValueArg = None,
) -> Partition:
    """The kernels and refusal decisions for a target (what `opfuse fusion` shows)."""
    return compile(source, target, input_shape, input_value=input_value).partition


def without_cascades(result: CompileResult) -> CompileResult:
    """``result`` with its cascades split back into their members (``--no-cascades``)."""
    return dataclasses.replace(result, partition=result.partition.without_cascades())


def fusion_json(result: CompileResult) -> dict:
    """What `opfuse fusion --json` prints: target, kernels, decisions, passes."""
    return result.fusion_json()


def emit(result: CompileResult, ort: bool = False) -> onnx.ModelProto:
    """The optimized model as ONNX, kernel grouping in its metadata."""
    with gc_paused():
        return emit_onnx(
            result.optimized, result.partition, ort=ort, source_names=source_map(result.optimized)
        )


def quantize(result: CompileResult, calibration, *, method: str = "minmax",
             per_channel: bool = True, evaluation=None, keep_float: Iterable[str] = (),
             io: str = "float"):
    """The compiled float model as QDQ ONNX calibrated at its kernels' boundaries, with its
    accuracy against the float model (opfuse/quantize, docs/quantize.md); the kernels (or nodes)
    named in ``keep_float`` stay float; ``io="int8"``: int8 graph inputs and outputs (the
    converter's inference_input_type/inference_output_type). Writes nothing."""
    from opfuse.quantize import quantize as _quantize

    with gc_paused():
        return _quantize(result, calibration, method=method, per_channel=per_channel,
                         evaluation=evaluation, keep_float=tuple(keep_float), io=io)


def emit_c(
    result: CompileResult,
    outdir: str | Path,
    fuse: bool = True,
    planner: str = DEFAULT_PLANNER,
    cascades: bool = True,
    prefix: str = "opfuse",
    force: bool = False,
    extra_files: Mapping[str, bytes] | None = None,
):
    """Write the C project (model.h, model.c, weights.c, Makefile) for ``result`` into ``outdir``;
    the partition and arena are analyze's (``cascades`` false: its kernels layer by layer);
    ``prefix`` names every exported symbol (``PREFIX_model_invoke``...); ``force`` writes into a
    folder that holds files opfuse did not write (keeping them; opfuse/output/tree.py);
    ``extra_files`` (name -> bytes) are written with the project."""
    from opfuse.backends.c import emit_c as _emit_c

    with gc_paused():
        return _emit_c(result, Path(outdir), fuse=fuse, planner=planner, cascades=cascades,
                       prefix=prefix, force=force, extra_files=extra_files)


def validate_c(
    source: str | Path,
    target: str | Target = DEFAULT_TARGET,
    fuse: bool = True,
    inputs: str | Path | Mapping[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    input_shape: ShapeArg = None,
    cascades: bool = True,
    input_value: ValueArg = None,
) -> ValidationReport:
    """Compile to C, build with the system compiler, run, and compare with onnxruntime."""
    from opfuse.backends.c.int8.requant import is_quantized
    from opfuse.measure.validate.c_float import validate_c as _validate_c

    result = compile(source, target, input_shape, input_value=input_value)
    # int8, and any .tflite: against the source's own reference (TFLite Micro / LiteRT / ORT)
    if is_quantized(result.optimized) or str(source).lower().endswith(".tflite"):
        from opfuse.measure.validate.c_int8 import validate_c_int8

        return validate_c_int8(result, fuse=fuse, cascades=cascades)
    feeds = read_inputs(inputs, result)
    if frontend_for(source).name != "onnx":  # a float .tflite: LiteRT is the reference
        from opfuse.measure.validate.source import validate_c_against_source

        return validate_c_against_source(result, fuse=fuse, inputs=feeds, rtol=rtol, atol=atol,
                                          cascades=cascades)
    return _validate_c(result, fuse=fuse, inputs=feeds, rtol=rtol, atol=atol, cascades=cascades)


def per_kernel_c(
    source: str | Path,
    target: str | Target = DEFAULT_TARGET,
    inputs: str | Path | Mapping[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    input_shape: ShapeArg = None,
    input_value: ValueArg = None,
):
    """Every kernel output of the generated C against a reference (opfuse/measure/validate/per_kernel.py)."""
    import tempfile

    from opfuse.measure.validate.per_kernel import per_kernel

    result = compile(source, target, input_shape, input_value=input_value)
    feeds = read_inputs(inputs, result)
    with tempfile.TemporaryDirectory(prefix="opfuse-kernels-") as tmp:
        return per_kernel(result, Path(tmp) / "model", feeds, rtol=rtol, atol=atol)


def emulate_c(
    source: str | Path,
    target: str | Target = "cortex-m7",
    inputs: str | Path | Mapping[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    input_shape: ShapeArg = None,
    timeout_s: float = 300.0,
    cascades: bool = True,
    input_value: ValueArg = None,
):  # -> opfuse.measure.run.qemu.Emulation
    """Compile to C, cross-compile for the target's board, run in QEMU and compare with
    onnxruntime; with the ELF's footprint and per-kernel instruction counts (``cascades`` false:
    the C runs layer by layer instead of streaming the partition's cascades)."""
    from opfuse.measure.run.qemu import emulate_c as _emulate_c

    result = compile(source, target, input_shape, input_value=input_value)
    feeds = read_inputs(inputs, result)
    return _emulate_c(result, inputs=feeds, rtol=rtol, atol=atol, timeout_s=timeout_s,
                      cascades=cascades)


def read_inputs(inputs: str | Path | Mapping[str, np.ndarray] | None,
                 result: CompileResult) -> Mapping[str, np.ndarray] | None:
    """An .npz path read and held to the compiled model's inputs (opfuse/measure/validate/given_inputs.py): the C
    is built for their static shapes. Arrays given as a mapping are returned as they are."""
    from opfuse.frontends.arrays import read_npz
    from opfuse.measure.validate.given_inputs import check_inputs, specs_of_model

    if not isinstance(inputs, str | Path):
        return inputs
    arrays = read_npz(inputs)
    if frontend_for(result.source).name != "onnx":
        return arrays  # a .tflite's inputs are its reference's to check
    return check_inputs(arrays, specs_of_model(result.optimized), str(inputs))


def bench(source: str | Path, target: str | Target = DEFAULT_TARGET, repeats: int = 20) -> dict:
    """Median latency of fused C, unfused C, onnxruntime ORT_ENABLE_ALL and ORT_DISABLE_ALL."""
    from opfuse.measure.validate.c_float import bench as _bench

    return _bench(compile(source, target), repeats=repeats)


def save(proto: onnx.ModelProto, path: str | Path, protect: str | Path | None = None) -> None:
    """Write by opfuse/output's rules; refuse to overwrite ``protect`` (the input model)."""
    save_model(proto, path, protect=protect)


def _as_proto(source: str | Path | onnx.ModelProto) -> onnx.ModelProto | str | Path:
    if isinstance(source, onnx.ModelProto):
        return source
    built = source_proto(source)
    return built if built is not None else source


def validate(
    original: str | Path | onnx.ModelProto,
    optimized: str | Path | onnx.ModelProto,
    inputs: str | Path | Mapping[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    input_shape: ShapeArg = None,
    input_value: ValueArg = None,
) -> ValidationReport:
    """Run both models in onnxruntime on the same seeded (or given) inputs and compare outputs.
    A .tflite ``original`` runs in its own reference (TFLite Micro or LiteRT) instead.
    ``input_value``: inputs of the original bound to constants in ``optimized``."""
    if isinstance(original, str | Path) and frontend_for(original).name != "onnx":
        from opfuse.frontends.arrays import read_npz
        from opfuse.measure.validate.source import validate_onnx_against_source

        feeds = read_npz(inputs) if isinstance(inputs, str | Path) else inputs
        return validate_onnx_against_source(
            original, _as_proto(optimized), inputs=feeds, rtol=rtol, atol=atol
        )
    return _validate(
        _as_proto(original),
        _as_proto(optimized),
        inputs=inputs,
        rtol=rtol,
        atol=atol,
        input_shapes=_shapes(input_shape),
        input_values=_values(original, input_value),
    )


def _values(original: str | Path | onnx.ModelProto, input_value: ValueArg) -> dict:
    from opfuse.pipeline import bound_values, read

    if not input_value:
        return {}
    proto = original if isinstance(original, onnx.ModelProto) else read(original)
    return bound_values(proto, "model" if isinstance(original, onnx.ModelProto) else original,
                        input_value)


def get_target(name: str) -> Target:
    return load_target(name)


def list_models() -> list[models.ModelSpec]:
    return list(models.MODELS.values())
