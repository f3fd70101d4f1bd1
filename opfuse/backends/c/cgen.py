"""Small code-generation helpers: an indenting writer, C literals, attributes, shapes and strides."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import onnx_ir as ir

from opfuse.errors import OpfuseError
from opfuse.ir.values import const, static_dims


class CWriter:
    """Lines of C with indentation; ``open``/``close`` wrap a brace block."""

    def __init__(self, indent: int = 0) -> None:
        self.lines: list[str] = []
        self.depth = indent

    def __call__(self, line: str = "") -> None:
        self.lines.append(("    " * self.depth + line) if line else "")

    def open(self, head: str) -> None:
        self(head + " {")
        self.depth += 1

    def close(self, tail: str = "") -> None:
        self.depth -= 1
        self("}" + tail)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def flit(x: float) -> str:
    """A float32 C literal that reads back to exactly ``x`` (as float32)."""
    x = float(np.float32(x))
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    text = f"{x:.9g}"
    if "e" not in text and "." not in text and "n" not in text:
        text += ".0"
    return f"{text}f" if not text.startswith("-") else f"({text}f)"


def cname(text: str, limit: int = 40) -> str:
    """An identifier fragment for opfuse's own text (a kernel name, made of the op types of
    covered ops): ASCII letters and digits, others ``_``, at most ``limit`` long. Never given a
    model's name (docs/architecture.md, "Names from a model")."""
    out = "".join(c if c.isascii() and c.isalnum() else "_" for c in text[:limit])
    return out if out and not out[0].isdigit() else "_" + out[: limit - 1]


def who(node: ir.Node) -> str:
    return f"{node.op_type} node '{node.name}'"


def attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    if a is None:
        return default
    value = a.value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, tuple | list):
        return list(value)
    return value


def dims(value: ir.Value | None, node: ir.Node) -> tuple[int, ...]:
    """``static_dims(value)``, which C needs: a value without them is refused, naming ``node``."""
    found = static_dims(value)
    if found is None:
        name = "an omitted input" if value is None else f"'{value.name}'"
        raise OpfuseError(f"C backend: {who(node)}: {name} has no static shape")
    return found


def need_const(node: ir.Node, index: int, what: str) -> np.ndarray:
    value = node.inputs[index] if index < len(node.inputs) else None
    arr = const(value)
    if arr is None:
        raise OpfuseError(
            f"C backend: {who(node)}: its {what} (input {index}) must be a constant to emit C"
        )
    return arr


def contiguous(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


def bcast_strides(shape: Sequence[int], out: Sequence[int]) -> list[int]:
    """Element strides of an operand of ``shape`` broadcast (numpy rules) to ``out``."""
    if len(shape) > len(out):
        raise ValueError("operand has a higher rank than the output")
    full = [1] * (len(out) - len(shape)) + list(shape)
    own = contiguous(full)
    strides = []
    for d, (s, o) in enumerate(zip(full, out, strict=True)):
        if s == o:
            strides.append(own[d] if o != 1 else 0)
        elif s == 1:
            strides.append(0)
        else:
            raise ValueError(f"shape {tuple(shape)} does not broadcast to {tuple(out)}")
    return strides


def merge(shape: Sequence[int], groups: Sequence[Sequence[int]], strides: Sequence[int]):
    """Strides on a view of ``shape`` whose dims merge the dims in each group, or None."""
    out = []
    for group in groups:
        live = [d for d in group if shape[d] != 1]
        if not live:
            out.append(0)
            continue
        stride, span = strides[live[-1]], shape[live[-1]]
        for d in reversed(live[:-1]):
            if strides[d] != stride * span:
                return None
            span *= shape[d]
        out.append(stride)
    return out


def collapse(out: Sequence[int], operands: Sequence[Sequence[int]]):
    """Drop size-1 dims and merge adjacent dims where every operand's strides allow it.

    Returns (shape, per-operand strides); the shape has at least one dim."""
    keep = [d for d in range(len(out)) if out[d] != 1]
    shape = [out[d] for d in keep] or [1]
    strides = [[s[d] for d in keep] or [0] for s in operands]
    d = len(shape) - 1
    while d > 0:
        if all(s[d - 1] == s[d] * shape[d] for s in strides):
            shape[d - 1 : d + 1] = [shape[d - 1] * shape[d]]
            for s in strides:
                s[d - 1 : d + 1] = [s[d]]
        d -= 1
    return shape, strides


def offset_expr(coords: Sequence[str], strides: Sequence[int]) -> str:
    """``c0*s0 + c1*s1 + ...`` without zero terms ("0" when all are zero)."""
    terms = []
    for c, s in zip(coords, strides, strict=True):
        if s == 0 or c == "0":
            continue
        terms.append(c if s == 1 else f"({c})*{s}")
    return " + ".join(terms) if terms else "0"


def blocks(total: int, size: int) -> Iterator[tuple[int, int, int]]:
    """``total`` items in blocks of ``size``, as ``(size, count, start)``: the ``count`` full
    blocks from 0, then one shorter block of the rest (none where a count would be 0). Kernels
    emit each as its own loop so every block size is a constant to gcc."""
    full, rest = divmod(total, size)
    if full:
        yield size, full, 0
    if rest:
        yield rest, 1, full * size


def block_loops(w: CWriter, total: int, size: int, counter: str, first: str,
                base: str = "") -> Iterator[int]:
    """``blocks(total, size)`` as C: for each, a loop over its blocks (no loop for one) that
    declares ``first`` = ``base`` + the block's first index; yields the block's size, for the
    caller to write the body, and closes the loop when the caller asks for the next."""
    for length, count, start in blocks(total, size):
        w.open(f"for (int {counter} = 0; {counter} < {count}; ++{counter})" if count > 1 else "")
        w(f"const int {first} = {base}{start}{f' + {counter}*{length}' if count > 1 else ''};")
        yield length
        w.close()


def pick_block(n: int, choices: Sequence[int] = (8, 4, 2, 1)) -> int:
    return next(b for b in choices if n % b == 0)
