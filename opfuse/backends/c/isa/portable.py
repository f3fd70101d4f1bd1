"""The portable ISA module: plain C99 that any compiler vectorizes as it can (docs/isa.md). Its
writers are every other module's fallback, under their ``#else``."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.base import IsaKernels


def dot(w: CWriter, acc: str, a: str, a_ctype: str, za: int, b: str, k: int) -> None:
    """``acc += sum((a[kk] - za) * b[kk]) for kk < k``; ``b`` is int8 (zero point 0)."""
    del a_ctype  # one loop for int8 and uint8 activations
    w(f"for (int kk = 0; kk < {k}; ++kk) {acc} += ((int32_t){a}[kk] - {za}) * {b}[kk];")


def dot_tail(w: CWriter, acc: str, a: str, za: int, b: str, k: int) -> None:
    """The steps ``kk .. k`` a vector loop left (``kk`` declared by it)."""
    w(f"for (; kk < {k}; ++kk) {acc} += ((int32_t){a}[kk] - {za}) * {b}[kk];")


def saturate8(w: CWriter, value: str, ranged: bool) -> None:
    """``int32_t v``: ``value`` clamped to [-128, 127]."""
    del ranged  # the clamp itself tells the compiler the range
    w(f"int32_t v = opfuse_clamp({value}, -128, 127);")


KERNELS = IsaKernels(name="portable", prelude="", dot=dot, saturate8=saturate8)
