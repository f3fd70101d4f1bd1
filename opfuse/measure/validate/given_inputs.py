"""Inputs a user gives (``--inputs FILE.npz``), held to the model's inputs before anything runs.

One array per graph input, keyed by the input's name; its shape must be the input's (a symbolic
dim takes any size) and its dtype the input's. Numbers of the same kind are converted when they
survive the conversion (numpy's float64 default for a float32 input, int32 ids for an int64
input); anything else is one line naming the input and the file (docs/architecture.md, "Outputs
and limits": bad input is one line, exit 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from opfuse.errors import OpfuseError


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...] | None  # None: any shape; a None dim: any size


def specs_of_session(args: Sequence[object], dtype_of: Callable[[object], np.dtype]) -> list[InputSpec]:
    """The inputs of an onnxruntime session (``sess.get_inputs()``; ``dtype_of`` maps its type
    names, refusing the ones validation cannot feed)."""
    return [InputSpec(a.name, dtype_of(a), tuple(d if isinstance(d, int) and d >= 0 else None
                                                 for d in a.shape)) for a in args]


def specs_of_model(model: ir.Model) -> list[InputSpec]:
    """The graph inputs of an imported model (static shapes: the C is built for them)."""
    specs = []
    for value in model.graph.inputs:
        if value.dtype is None:
            continue
        dims = None if value.shape is None else tuple(
            d if isinstance(d, int) else None for d in value.shape)
        specs.append(InputSpec(value.name or "", np.dtype(value.dtype.numpy()), dims))
    return specs


def check_inputs(arrays: Mapping[str, np.ndarray], specs: Sequence[InputSpec],
                 where: str) -> dict[str, np.ndarray]:
    """The arrays for ``specs``, converted where lossless; raise naming the first misfit."""
    missing = [s.name for s in specs if s.name not in arrays]
    if missing:
        have = ", ".join(sorted(arrays)) or "none"
        raise OpfuseError(f"{where}: no values for input(s) {', '.join(missing)} (it has: {have})")
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        value = np.asarray(arrays[spec.name])
        if spec.dims is not None and not _fits(value.shape, spec.dims):
            want = "x".join("?" if d is None else str(d) for d in spec.dims) or "scalar"
            raise OpfuseError(f"{where}: input '{spec.name}' has shape "
                              f"{'x'.join(map(str, value.shape)) or 'scalar'}, the model takes {want}")
        feeds[spec.name] = _converted(value, spec, where)
    return feeds


def _fits(shape: tuple[int, ...], dims: tuple[int | None, ...]) -> bool:
    return len(shape) == len(dims) and all(d is None or d == s for s, d in zip(shape, dims,
                                                                               strict=True))


def _converted(value: np.ndarray, spec: InputSpec, where: str) -> np.ndarray:
    want = spec.dtype
    if value.dtype == want:
        return value
    if value.dtype.kind == want.kind == "f":
        return value.astype(want)
    if value.dtype.kind in "iu" and want.kind in "iu":
        cast = value.astype(want)
        if np.array_equal(cast.astype(value.dtype), value):
            return cast
    raise OpfuseError(f"{where}: input '{spec.name}' is {value.dtype} in the file, the model takes "
                      f"{want}")
