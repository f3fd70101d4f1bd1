"""opfuse: operator-fusion compiler and analyzer for edge inference.

The public API is ``opfuse.api`` (load, compile, fuse, analyze, emit, save, validate, ...),
re-exported here.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from opfuse.errors import OpfuseError as OpfuseError  # re-exported

__version__ = "0.1.0"


def __getattr__(name: str):
    """The API is imported on first use, so that `opfuse --help` does not load onnx_ir or
    onnxruntime (every `opfuse` run imports this package first)."""
    here = Path(__file__).parent
    if (here / name).is_dir() or (here / f"{name}.py").is_file() or (
        name.startswith("__") and name != "__all__"
    ):  # a submodule not imported yet (`from opfuse import models`), or a dunder probe
        raise AttributeError(f"module 'opfuse' has no attribute '{name}'")
    api = importlib.import_module("opfuse.api")
    if name == "__all__":
        return [*api.__all__, "OpfuseError"]
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'opfuse' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *importlib.import_module("opfuse.api").__all__})
