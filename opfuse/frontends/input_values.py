"""``--input-value NAME=VALUE``: a graph input bound to a constant before shape inference, so that
what depends on it folds (an If on a sample rate, silero VAD's ``sr``; docs/commands.md).

The value is parsed against the input's element type and declared shape: a scalar, or
comma-separated values filling a static shape (``mask=1,0,1``). Every mistake is one line naming
the input (exit 2). The bound input becomes an initializer of the same name in the imported model
(the reference run feeds the same value to the original, measure/validate)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import onnx

from opfuse.errors import OpfuseError

_KINDS = {"i": int, "u": int, "f": float}


def parse_input_value_specs(specs: Iterable[str] | Mapping[str, object] | None) -> dict[str, str]:
    """``NAME=VALUE`` items (the CLI's --input-value) as {name: text}; a Mapping passes through
    (values as given: numbers, lists or arrays, checked against the model at import)."""
    if specs is None:
        return {}
    if isinstance(specs, Mapping):
        return {str(k): _text(v) for k, v in specs.items()}
    found: dict[str, str] = {}
    for spec in specs:
        name, sep, value = str(spec).partition("=")
        if not sep or not name or not value.strip():
            raise OpfuseError(f"--input-value '{spec}': expected NAME=VALUE such as sr=16000")
        found[name] = value.strip()
    return found


def _text(value: object) -> str:
    arr = np.asarray(value)
    return ",".join(str(v) for v in arr.reshape(-1).tolist())


def typed_input_values(proto: onnx.ModelProto, specs: Mapping[str, str], path: str | Path,
                       shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """Each ``NAME=VALUE`` as an array of the input's type and shape (``shapes``: what
    --input-shape binds), checked against ``proto``. The CLI prints messages through
    ``for_terminal``, so names go in as they are."""
    initializers = {t.name for t in proto.graph.initializer}
    inputs = {i.name: i for i in proto.graph.input if i.name not in initializers}
    values: dict[str, np.ndarray] = {}
    for name, text in specs.items():
        shown = name
        if name not in inputs:
            raise OpfuseError(f"{path}: --input-value names '{shown}', which is not a graph input "
                              f"(inputs: {', '.join(inputs) or 'none'})")
        tensor = inputs[name].type.tensor_type
        if not inputs[name].type.HasField("tensor_type"):
            raise OpfuseError(f"{path}: --input-value {shown}: the input is not a tensor")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type) if tensor.elem_type else None
        if dtype is None or (dtype.kind not in _KINDS and dtype.kind != "b"):
            raise OpfuseError(f"{path}: --input-value {shown}: the input's element type "
                              f"{onnx.TensorProto.DataType.Name(tensor.elem_type)} takes no value")
        items = [v.strip() for v in text.split(",")]
        parsed = [_parse(v, dtype, shown, path) for v in items]
        dims = ([d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
                if tensor.HasField("shape") else [len(parsed)])
        if shapes and name in shapes:
            dims = list(shapes[name])
        if any(d is None for d in dims):
            if len(dims) != 1:
                raise OpfuseError(f"{path}: --input-value {shown}: the input's shape has unknown "
                                  "dims; give it with --input-shape too")
            dims = [len(parsed)]
        if math.prod(dims) != len(parsed):
            shape = "a scalar" if not dims else f"shape {dims} ({math.prod(dims)} values)"
            raise OpfuseError(f"{path}: --input-value {shown}: {len(parsed)} value(s) given, the "
                              f"input is {shape}")
        values[name] = np.array(parsed, dtype=dtype).reshape(dims)
    return values


def _parse(text: str, dtype: np.dtype, name: str, path: str | Path) -> object:
    shown = text[:40]
    try:
        if dtype.kind == "b":
            if text.lower() not in ("0", "1", "true", "false"):
                raise ValueError(text)
            return text.lower() in ("1", "true")
        value = _KINDS[dtype.kind](text)
    except (ValueError, OverflowError):
        raise OpfuseError(f"{path}: --input-value {name}: '{shown}' is not a valid {dtype.name} "
                          "value") from None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise OpfuseError(f"{path}: --input-value {name}: {value} does not fit {dtype.name}")
    elif not math.isfinite(value):
        raise OpfuseError(f"{path}: --input-value {name}: '{shown}' is not a finite number")
    return value


def bind_input_values(proto: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> None:
    """Turn each bound graph input of ``proto`` into an initializer holding its value."""
    if not values:
        return
    kept = [i for i in proto.graph.input if i.name not in values]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    for name, arr in values.items():
        proto.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
