"""The int8 output stage, spelled once (docs/architecture.md, "int8 in the IR"): a kernel's int32
accumulator (bias included) requantized by its ``Requant`` (TFLite's or onnxruntime's arithmetic,
int8/common.py), plus the output zero point, clamped to the output type. Every int8 kernel that
requantizes a sum writes its value through this module: ``requant_clamp`` / ``emit_output_value``
(the constants read per call), or ``emit_clamped`` with the per-channel constants hoisted out of a
row (the depthwise family: ``DwQuant``, int8/depthwise_quant.py, and the channel setup of
int8/depthwise_dsp.py). An ISA may write it in vectors (``IsaKernels.store_tile``,
``fast_requant``) with the same integers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.ctype import CType
from opfuse.backends.c.int8.common import Requant
from opfuse.backends.c.isa import IsaKernels, kernels
from opfuse.quant import TFLITE
from opfuse.targets.isa import Isa

if TYPE_CHECKING:
    from opfuse.backends.c.int8.depthwise_quant import DwQuant


def requant_clamp(rq: Requant, acc: str, ch: str, zy: int, yct: CType | None,
                  bounds: tuple[int, int] | None = None) -> str:
    """The output's integer as a C expression: ``acc`` of channel ``ch`` requantized, + z_y,
    clamped to ``bounds`` (a fused activation's range), by default ``yct``'s range."""
    lo, hi = bounds if bounds is not None else (yct.lo, yct.hi)
    return f"opfuse_clamp({rq(acc, ch)} + {zy}, {lo}, {hi})"


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


def emit_requantized(w: CWriter, dq: DwQuant, acc: str) -> str:
    """``acc`` requantized (before the zero point), as a C expression after the statements it
    writes: in TFLite's mode with the channel's constants (``emit_channel_setup``).
    ``(a*m + 2^30) >> 31`` is TFLite's rounding doubling high multiply: its nudge of ``1 - 2^30``
    for a negative product and truncating division give the same integer as this floor, and a
    multiplier below 2^31 never saturates; then RoundingDivideByPowerOfTwo."""
    if dq.rq.mode != TFLITE:
        return dq.rq(acc, "c")
    x = f"(int32_t)((uint32_t)({acc}) << qls)" if dq.left_shift else acc
    w(f"const int32_t hx = (int32_t)(((int64_t){x}*qm + ((int64_t)1 << 30)) >> 31);")
    return "(hx >> qrs) + ((hx & qmask) > qthr + (hx < 0 ? 1 : 0) ? 1 : 0)"


def emit_clamped(w: CWriter, isa: IsaKernels, dq: DwQuant, acc: str, lo: int, hi: int,
                 doubled: bool = False) -> None:
    """``int32_t v``: ``acc`` requantized, plus the output zero point, clamped to ``lo .. hi``
    (the int8 range with the ISA's ``saturate8``). Where ``dq.fast``, the ISA's fast form
    (``IsaKernels.fast_requant``; ``doubled``: ``DwQuant.doubled``) with this C in its #else."""

    def general(w: CWriter) -> None:
        r = emit_requantized(w, dq, acc)
        w(f"int32_t v = opfuse_clamp({r} + {dq.zy}, {lo}, {hi});")

    fast = isa.fast_requant.clamp if dq.fast else None
    if fast is not None:
        fast(w, dq, acc, lo, hi, doubled, general)
        return
    if (lo, hi) != (-128, 127) or isa.saturate8 is None:
        general(w)
        return
    r = emit_requantized(w, dq, acc)
    isa.saturate8(w, f"{r} + {dq.zy}", True)  # a chain's clamp to the same range folds away
