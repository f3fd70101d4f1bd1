"""The compiler driver: a straight line of stages with a graph check between them.

load -> canonicalize -> partition -> plan. Each stage takes what the previous produced; the model
as imported ("before") is kept untouched beside the canonicalized one ("after"). The partition and
its arena plan are made once per (cascades, planner, element size): ``CompileResult.schedule`` is
what analyze reports and what ``--emit c`` and ``--emulate`` build (docs/architecture.md, "One
partition, one plan").
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import onnx
import onnx_ir as ir

from opfuse import models
from opfuse.compiled import CompileResult
from opfuse.errors import OpfuseError
from opfuse.frontends import import_proto
from opfuse.frontends.input_values import parse_input_value_specs, typed_input_values
from opfuse.frontends.registry import frontend_for
from opfuse.fusion import partition
from opfuse.fusion.cascade_check import keep_if_lower
from opfuse.ir import infer_shapes, require_static, verify
from opfuse.passes import canonicalize
from opfuse.targets import DEFAULT_TARGET, Target, load_target


def source_proto(source: str | Path) -> onnx.ModelProto | None:
    """The built-in model named ``source``, or None when ``source`` should be read as a path.

    A file wins over a built-in name; a folder never does (``compile ds_cnn --emit c -o ds_cnn``
    writes a folder named like the built-in, and ``validate ds_cnn`` must still find the built-in)."""
    text = str(source)
    if Path(text).is_file() or text not in models.MODELS:
        return None
    return models.build_model(text)


def read(source: str | Path) -> onnx.ModelProto:
    """The ONNX proto of a model file or a built-in model name, as read."""
    proto = source_proto(source)
    if proto is not None:
        return proto
    path = Path(source)
    if not path.is_file():
        found = "a folder, not a model file" if path.is_dir() else "no such file"
        raise OpfuseError(
            f"{source}: {found}, and not a built-in model name "
            f"(built-ins: {', '.join(models.MODELS)})"
        )
    return frontend_for(source).read(path)  # by extension: .onnx, .tflite


def load(source: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None,
         input_values: Mapping[str, object] | Iterable[str] | None = None) -> ir.Model:
    """Import a model file or a built-in model name into the IR (static shapes, unique names)."""
    proto = read(source)
    values = bound_values(proto, source, input_values, input_shapes)
    return import_proto(proto, str(source), input_shapes, values)


def bound_values(proto: onnx.ModelProto, source: str | Path,
                 input_values: Mapping[str, object] | Iterable[str] | None,
                 input_shapes: dict[str, tuple[int, ...]] | None = None) -> dict:
    """``--input-value`` items typed against ``proto``'s inputs (frontends/input_values.py)."""
    specs = parse_input_value_specs(input_values)
    return typed_input_values(proto, specs, str(source), input_shapes) if specs else {}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a stage builds many small objects.

    Graph stages allocate node, value and use objects by the hundred thousand; every gen-2 pass
    walks all of them, which made partitioning a 10k-node graph 4x slower. Reference counting
    still frees everything; cycles are collected when the collector resumes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def c_support(target: Target | None = None):  # -> opfuse.fusion.support.KernelSupport
    """What the C backend can write (for ``target``'s ISA, which picks its int8 conv path): every
    target has a C backend (``--emit c``), so its fusion follows it. Imported here, not at the
    top: the C backend imports this module."""
    from opfuse.backends.c.support import C_SUPPORT
    from opfuse.backends.c.support import c_support as for_isa

    return C_SUPPORT if target is None else for_isa(target.isa)


@gc_paused()
def compile_model(
    source: str | Path,
    target: str | Target = DEFAULT_TARGET,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    input_values: Mapping[str, object] | Iterable[str] | None = None,
) -> CompileResult:
    """Import, canonicalize and partition ``source`` for ``target``; ``input_values`` binds graph
    inputs to constants (``--input-value``)."""
    tgt = target if isinstance(target, Target) else load_target(target)
    proto = read(source)
    values = bound_values(proto, source, input_values, input_shapes)
    optimized = import_proto(proto, str(source), input_shapes, values)
    counts = canonicalize(optimized)
    # rewrites set the shapes of what they create; infer only where one did not (values after an
    # opaque op of unknown size stay unknown, and analysis reports them as such)
    if require_static(optimized, allow_unknown=True):
        infer_shapes(optimized)
    verify(optimized, "canonicalize")
    result = CompileResult(
        source=str(source),
        optimized=optimized,
        partition=partition(optimized, tgt, support=c_support(tgt)),
        passes=counts,
        target=tgt,
        input_shapes=dict(input_shapes or {}),
        input_values=values,
        proto=proto,
    )
    return _views_that_lower_the_peak(_cascades_that_lower_the_peak(result))


def _views_that_lower_the_peak(result: CompileResult) -> CompileResult:
    """A conv reading an NHWC graph input in place (fusion/views.py) saves the input's copy but
    runs layer by layer: where that conv streamed in a cascade without the view (the first
    layers of hand_landmark_lite), the copy may cost less than the conv's whole output. The
    partition without views is kept where its planned peak (as emitted, cascades on) is lower,
    the view's edge then saying why."""
    from opfuse.backends.c.support import C_SUPPORT  # no target: no conv reads NHWC in place
    from opfuse.fusion.views import nhwc_view

    nodes = {n.name: n for n in result.optimized.graph}
    views = [k for k in result.partition.kernels
             if nhwc_view([nodes[n] for n in k.nodes[:2]]) is not None]
    if not views:
        return result
    plain = _cascades_that_lower_the_peak(dataclasses.replace(
        result, partition=partition(result.optimized, result.target, support=C_SUPPORT)))
    with_views, without = (r.schedule(cascades=True).plan.peak_bytes for r in (result, plain))
    if with_views <= without:
        return result
    note = (f"; read in place by the Conv, which then runs layer by layer, the arena plan peaks "
            f"at {with_views:,} bytes, above the {without:,} bytes of the copy and its cascades")
    pairs = {(k.nodes[0], k.nodes[1]) for k in views}
    decisions = tuple(dataclasses.replace(d, message=d.message + note)
                      if (d.producer, d.consumer) in pairs else d
                      for d in plain.partition.decisions)
    return dataclasses.replace(plain, partition=dataclasses.replace(plain.partition,
                                                                    decisions=decisions))


def _cascades_that_lower_the_peak(result: CompileResult) -> CompileResult:
    """No cascade is kept unless the arena plan with it peaks lower (fusion/cascade_check.py)."""
    if not result.partition.cascades:
        return result
    peaks = [result.schedule(cascades=c).plan.peak_bytes for c in (True, False)]
    kept = keep_if_lower(result.optimized, result.partition, *peaks,
                         same_arena=result.target.fusion.cascade_same_arena)
    return result if kept is result.partition else dataclasses.replace(result, partition=kept)
