"""opfuse: operator-fusion compiler and analyzer for edge inference."""

from __future__ import annotations

from opfuse.api import (
    DEFAULT_TARGET,
    Analysis,
    CompileResult,
    analyze,
    compile,
    emit,
    fuse,
    fusion_json,
    get_target,
    list_models,
    list_targets,
    load,
    save,
    validate,
)
from opfuse.errors import OpfuseError

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TARGET",
    "Analysis",
    "analyze",
    "CompileResult",
    "OpfuseError",
    "compile",
    "emit",
    "fuse",
    "fusion_json",
    "get_target",
    "list_models",
    "list_targets",
    "load",
    "save",
    "validate",
]
