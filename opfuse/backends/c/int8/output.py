"""The int8 output stage, spelled once (docs/architecture.md, "int8 in the IR"): a kernel's int32
accumulator (bias included) requantized by its ``Requant`` (TFLite's or onnxruntime's arithmetic,
int8/common.py), plus the output zero point, clamped to the output type. Every int8 kernel that
requantizes a sum writes its value through this module; the depthwise family hoists the same
requantization's per-channel constants out of its rows (int8/depthwise_quant.py), and an ISA may
write it in vectors (``IsaKernels.store_tile``, ``fast_requant``) with the same integers."""

from __future__ import annotations

from opfuse.backends.c.ctype import CType
from opfuse.backends.c.int8.common import Requant
from opfuse.backends.c.isa import kernels
from opfuse.targets.isa import Isa


def requant_clamp(rq: Requant, acc: str, ch: str, zy: int, yct: CType) -> str:
    """The output's integer as a C expression: ``acc`` of channel ``ch`` requantized, + z_y,
    clamped to ``yct``'s range."""
    return f"opfuse_clamp({rq(acc, ch)} + {zy}, {yct.lo}, {yct.hi})"


def emit_output_value(w, rq: Requant, acc: str, ch: str, zy: int, yct: CType,  # noqa: ANN001
                      last: bool, isa: Isa) -> None:
    """``int32_t v``: ``requant_clamp``'s value, the clamp to [-128, 127] as the ISA's
    ``saturate8`` (one SSAT on Armv7E-M); before a chain (not ``last``) it may tell the compiler
    the value's range, so the chain's own clamp to [-128, 127] (a Relu's at z_y = -128) folds
    away as after a clamp."""
    saturate8 = kernels(isa).saturate8
    if (yct.lo, yct.hi) == (-128, 127) and saturate8 is not None:
        saturate8(w, f"{rq(acc, ch)} + {zy}", not last)
    else:
        w(f"int32_t v = {requant_clamp(rq, acc, ch, zy, yct)};")
