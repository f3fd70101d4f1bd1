"""The compiler driver: a straight line of stages with a graph check between them.

load -> canonicalize -> partition. Each stage takes what the previous produced; the model as
imported ("before") is kept untouched beside the canonicalized one ("after").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_ir as ir

from opfuse import models
from opfuse.errors import OpfuseError
from opfuse.frontends import import_proto, load_onnx
from opfuse.fusion import Partition, partition, trivial_partition
from opfuse.ir import infer_shapes, require_static, verify
from opfuse.passes import canonicalize
from opfuse.targets import Target, load_target

DEFAULT_TARGET = "x86-host"


@dataclass(frozen=True)
class CompileResult:
    source: str  # path or built-in model name
    original: ir.Model  # as imported: every node its own kernel
    optimized: ir.Model  # canonicalized
    partition: Partition  # kernels of ``optimized`` on ``target``
    before: Partition  # the trivial partition of ``original``
    passes: dict[str, int]  # pass name -> times fired
    target: Target


def source_proto(source: str | Path) -> onnx.ModelProto | None:
    """The built-in model named ``source``, or None when ``source`` should be read as a path."""
    text = str(source)
    if Path(text).exists() or text not in models.MODELS:
        return None
    return models.build_model(text)


def load(source: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None) -> ir.Model:
    """Import a model file or a built-in model name into the IR (static shapes, unique names)."""
    proto = source_proto(source)
    if proto is not None:
        return import_proto(proto, f"<built-in {source}>", input_shapes)
    if not Path(source).exists() and not str(source).endswith(".onnx"):
        raise OpfuseError(
            f"{source}: no such file or built-in model (built-ins: {', '.join(models.MODELS)})"
        )
    return load_onnx(source, input_shapes)


def compile_model(
    source: str | Path,
    target: str | Target = DEFAULT_TARGET,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
) -> CompileResult:
    """Import, canonicalize and partition ``source`` for ``target``."""
    tgt = target if isinstance(target, Target) else load_target(target)
    original = load(source, input_shapes)
    optimized = original.clone()
    counts = canonicalize(optimized)
    infer_shapes(optimized)
    require_static(optimized, "after canonicalization")
    verify(optimized, "canonicalize")
    return CompileResult(
        source=str(source),
        original=original,
        optimized=optimized,
        partition=partition(optimized, tgt),
        before=trivial_partition(original),
        passes=counts,
        target=tgt,
    )
