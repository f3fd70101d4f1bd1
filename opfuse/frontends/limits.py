"""Named limits on what a model may make opfuse allocate (docs/architecture.md, "Outputs and
limits"). A 177-byte model can ask for a 400 MB folded constant or a 4 TB input; each limit below
turns that into one line naming the value at fault, checked on inferred shapes before anything is
allocated. Users with genuinely large models raise a limit: ``--limit NAME=SIZE`` on the command
line, ``using_limits(Limits(...))`` (or ``limits=`` of ``opfuse.compile``) in Python.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace

from opfuse.errors import OpfuseError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Limits:
    """Byte limits (and one extent limit) that every import checks."""

    constant: int = 256 * MiB  # one constant the import folds (ConstantOfShape, Expand, Tile...)
    constants_total: int = 1 * GiB  # all constants folded at import, together
    activation: int = 2 * GiB  # one tensor a model declares or inference gives (inputs too)
    extent: int = 1 << 16  # strides, dilations, pads and kernel sizes (a window on a tensor)
    # the stack arrays of one generated C kernel (row and tile buffers): Linux gives a process's
    # main thread and glibc's threads 8 MiB; the largest of the shared models' kernels declare 64 KiB
    stack: int = 4 * MiB
    # graph outputs of one model: each is live to the end, so the arena planner's overlap lists
    # grow with their square (10,000 outputs: 127 s and 1.1 GB; the shared models have at most 12)
    outputs: int = 4096
    # constant data a model holds, counted as it is materialized: every ONNX initializer reading
    # an external region and every .tflite tensor reading a buffer once per reference (N of them
    # sharing one 1 MiB region are N MiB in memory); summed from the metadata before any is read.
    # Import holds ~7x its weights at its peak (256 shared 1 MiB regions: 2.0 GB RSS)
    weights: int = 256 * MiB
    # the constants folded at import may total this many times the model's own bytes (a model
    # under EXPANSION_FLOOR counts as that): a 177-byte ConstantOfShape wrote a 400 MB weights.c.
    # The shared models fold at most 1,284x (light_resnet50: 80 KB of ConstantOfShape fills)
    expansion: int = 4096

    def describe(self, name: str) -> str:
        value = getattr(self, name)
        return str(value) if name in COUNTS else format_size(value)


COUNTS = ("extent", "outputs", "expansion")  # limits that are counts (a ratio), not bytes
EXPANSION_FLOOR = 1 * KiB  # the smallest model size the expansion ratio is taken of


DEFAULT_LIMITS = Limits()
_CURRENT: ContextVar[Limits] = ContextVar("opfuse_limits", default=DEFAULT_LIMITS)
_SIZE = re.compile(r"(\d+)\s*(b|kib|mib|gib|tib)?", re.IGNORECASE)
_UNITS = {"b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": 1 << 40}


def current_limits() -> Limits:
    return _CURRENT.get()


@contextmanager
def using_limits(limits: Limits | None) -> Iterator[Limits]:
    """Every import inside the block checks ``limits`` (None: the current ones)."""
    token = _CURRENT.set(limits if limits is not None else _CURRENT.get())
    try:
        yield _CURRENT.get()
    finally:
        _CURRENT.reset(token)


def set_limits(limits: Limits) -> None:
    """For the command line: the limits of this process's one command."""
    _CURRENT.set(limits)


def format_size(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def parse_limits(specs: tuple[str, ...] | list[str], base: Limits = DEFAULT_LIMITS) -> Limits:
    """``NAME=SIZE`` items (``constant=512MiB``, ``activation=8GiB``, ``extent=100000``,
    ``expansion=10000``)."""
    names = [f.name for f in fields(Limits)]
    changes: dict[str, int] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        match = _SIZE.fullmatch(value.strip())
        if not sep or name not in names or not match or (name in COUNTS and match.group(2)):
            raise OpfuseError(f"--limit '{spec}': expected NAME=SIZE with NAME one of "
                              f"{', '.join(names)} (SIZE such as 512MiB; extent, outputs and "
                              "expansion are counts)")
        changes[name] = int(match.group(1)) * _UNITS[(match.group(2) or "b").lower()]
    return replace(base, **changes)


def refuse(what: str, size: int, limit: str, unit: str = "bytes") -> None:
    """Raise the one line for ``what`` of ``size`` over the named limit, if it is over."""
    limits = current_limits()
    allowed = getattr(limits, limit)
    if size > allowed:
        shown = format_size(size) if unit == "bytes" else f"{size:,}"
        raise OpfuseError(f"{what} is {shown}, over the {limit} limit of {limits.describe(limit)} "
                          f"(raise it with --limit {limit}={'SIZE' if unit == 'bytes' else 'N'})")


def refuse_expansion(what: str, size: int, model_bytes: int) -> None:
    """Raise the one line for constants ``what`` of ``size`` bytes folded from a model of
    ``model_bytes``, if over ``expansion`` times the model (taken as at least EXPANSION_FLOOR)."""
    ratio = current_limits().expansion
    if size > ratio * max(model_bytes, EXPANSION_FLOOR):
        raise OpfuseError(f"{what} is {format_size(size)}, {size / max(model_bytes, 1):,.0f} times "
                          f"the model's {format_size(model_bytes)}, over the expansion limit of "
                          f"{ratio}x (a model under {format_size(EXPANSION_FLOOR)} counts as "
                          f"{format_size(EXPANSION_FLOOR)}; raise it with --limit expansion=N)")


def tensor_bytes(dims: list[int] | tuple[int, ...], itemsize: int) -> int:
    """Bytes of a tensor; Python integers, so 10^12 elements cannot overflow."""
    return math.prod(int(d) for d in dims) * itemsize
