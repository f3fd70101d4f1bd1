"""The depthwise conv's rows on Helium (isa/mve/__init__.py; the kernel is
int8/depthwise_dsp.py): a whole output row of one channel, four pixels a vector, one int32 lane
each. Per tap: one widening load of the four inputs (``vldrbq_z_s32``, or a byte gather for a
stride above 1) and one ``vmlaq_n_s32`` by the tap's weight.

A vector whose windows all lie inside the row runs in a loop with the bias ``bk0_<KW>`` (the
zero point of every tap folded in). A vector at the row's ends is unrolled: each tap's load is
predicated (a constant mask through ``opfuse_pred``, the prelude's) on the lanes whose input
column exists, so a tap outside the row adds nothing, and each lane starts from the bias with
only its own taps' zero point folded in (``bk<k0>_<k1>``, as the scalar kernel's single
columns); where the kernel declares no such biases (windows over 3x3), every lane starts from
the whole window's and a tap outside the row reads z_x (``vpselq_s32``): the integers of the
portable C either way. They are stored either through the vector output stage (``vec``: TFLite's
fast requantization, as isa/mve/output.py, then four int8 at once) or lane by lane through the
kernel's own ``store``."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.mve.output import requant, requant_onnx

LANES = 4


def _window(g, col: int) -> tuple[int, int]:  # noqa: ANN001
    """The taps (k0, k1) of output column ``col`` that fall inside the input row."""
    (_, kw_), (_, sw), (_, pw) = g.k, g.s, g.p
    x0 = col * sw - pw
    return max(0, -x0), min(kw_, g.iw - x0)


def depthwise_row(w: CWriter, g, *, store: Callable[..., None], doubled: bool,  # noqa: ANN001
                  vec: tuple[int, int, int] | None, zx: int, biases: set,
                  fast: bool = True, scale: str | None = None, ranged: bool = False) -> None:
    """Every output column of row ``oh`` of channel ``c`` (the input rows ``r<kh>``, the taps
    ``wc`` and the biases ``bc``, ``bk<k0>_<k1>`` (those in ``biases``) declared by the kernel);
    ``vec``: (z_y, lo, hi) to requantize in vectors (``fast``: ``DwQuant.fast``, isa/mve/output.py)
    with the channel's ``qm``/``qs`` (``doubled``:
    ``qe``/``qr``, opfuse_requant_d's, whose ``qr`` may hold z_y: then z_y is 0 here), or by
    ONNX's rounding with the channel's float ``scale`` under MVE-F (``ranged``: without the
    clamps, ``Requant.ranged``; lane by lane in its #else), and store to ``yr``."""
    onnx = None if scale is None else (scale, ranged)
    kw_, ow = g.k[1], g.ow
    full = [v for v in range(0, ow, LANES) if v + LANES <= ow
            and all(_window(g, v + lane) == (0, kw_) for lane in range(LANES))]
    runs: list[list[int]] = []
    for v in full:
        if runs and runs[-1][-1] + LANES == v:
            runs[-1].append(v)
        else:
            runs.append([v])
    starts = {r[0]: r for r in runs}
    v = 0
    while v < ow:
        if v in starts:
            run = starts[v]
            w.open(f"for (int v0 = {v}; v0 < {run[-1] + LANES}; v0 += {LANES})")
            whole = f"bk0_{kw_}" if (0, kw_) in biases else _bias(g, 0, kw_, zx)
            _vector(w, g, "v0", [(0, kw_)] * LANES, f"vdupq_n_s32({whole})", store, doubled,
                    vec, LANES, fast, onnx=onnx)
            w.close()
            v = run[-1] + LANES
            continue
        lanes = [_window(g, v + lane) for lane in range(min(LANES, ow - v))]
        w.open("")
        w(f"const int v0 = {v};")
        if all(lane in biases for lane in lanes):  # each lane its own bias, the kernel's
            bias = "{" + ", ".join([f"bk{a}_{b}" for a, b in lanes]
                                   + ["0"] * (LANES - len(lanes))) + "}"
            _vector(w, g, "v0", lanes, bias, store, doubled, vec, len(lanes), fast,
                    onnx=onnx)
        else:  # one bias (every tap's zero point folded), a tap outside the row reads z_x
            whole = f"bk0_{kw_}" if (0, kw_) in biases else _bias(g, 0, kw_, zx)
            _vector(w, g, "v0", lanes, f"vdupq_n_s32({whole})", store, doubled, vec,
                    len(lanes), fast, zx, onnx)
        w.close()
        v += LANES


def _bias(g, k0: int, k1: int, zx: int) -> str:  # noqa: ANN001
    """The bias of a column whose taps ``k0 .. k1`` of each row are inside the row."""
    kh_, kw_ = g.k
    terms = " + ".join(f"wc[{kh * kw_ + k}]" for kh in range(kh_) for k in range(k0, k1))
    return f"bc - {zx}*({terms or 0})"


def _vector(w: CWriter, g, at: str, lanes: list[tuple[int, int]], bias: str,  # noqa: ANN001
            store: Callable[..., None], doubled: bool, vec: tuple[int, int, int] | None,
            count: int, fast: bool, pad: int | None = None,
            onnx: tuple[str, bool] | None = None) -> None:
    """The four columns from ``at``: each lane's taps (k0, k1), their bias (a C initializer of
    the vector), ``count`` lanes stored; ``pad``: the bias folds every tap's zero point, so a
    tap outside the row reads this (z_x) instead of nothing; ``onnx``: (scale, ranged) of
    ONNX's rounding."""
    (kh_, kw_), (_, sw), (_, pw) = g.k, g.s, g.p
    whole = all(lane == (0, kw_) for lane in lanes) and count == LANES
    w(f"int32x4_t acc = {bias};")
    if sw != 1:
        w(f"const uint32x4_t xo = vidupq_n_u32(0u, {sw});" if sw in (2, 4, 8) else
          f"const uint32x4_t xo = vmulq_n_u32(vidupq_n_u32(0u, 1), {sw}u);")
    for kh in range(kh_):
        w(f"const int8_t *x{kh} = r{kh} + {at}*{sw} - {pw};")
        for kw in range(kw_):
            on = [i for i, (a, b) in enumerate(lanes) if a <= kw < b]
            if not on:  # no lane's window has this tap: nothing, or z_x where the bias holds it
                if pad is not None:
                    w(f"acc = vaddq_n_s32(acc, {pad}*wc[{kh * kw_ + kw}]);")
                continue
            if whole:
                load = (f"vldrbq_s32(x{kh} + {kw})" if sw == 1
                        else f"vldrbq_gather_offset_s32(x{kh} + {kw}, xo)")
            else:
                p = f"opfuse_pred(0x{sum(0xF << (4 * i) for i in on):04x}u)"
                load = (f"vldrbq_z_s32(x{kh} + {kw}, {p})" if sw == 1
                        else f"vldrbq_gather_offset_z_s32(x{kh} + {kw}, xo, {p})")
                if pad is not None and len(on) < count:  # the lanes outside read z_x
                    load = f"vpselq_s32({load}, vdupq_n_s32({pad}), {p})"
            w(f"acc = vmlaq_n_s32(acc, {load}, wc[{kh * kw_ + kw}]);")
    if vec is not None and onnx is not None:
        w("#ifdef OPFUSE_MVEF")
        w(f"const float qf = {onnx[0]};")
        w("int32x4_t v = acc;")
        requant_onnx(w, "v", onnx[1])
        _clamp_store(w, vec, at, count)
        w("#else")
        _lanes(w, at, count, store, doubled)
        w("#endif")
        return
    if vec is not None:
        zy, lo, hi = vec
        if doubled:  # the kernel's opfuse_requant_d constants: (h - (h < 0) + qr) >> qe
            w("int32x4_t v = vqrdmulhq_n_s32(acc, qm);")
            w("v = vshlq_r_s32(vaddq_n_s32(vaddq_s32(v, vshrq_n_s32(v, 31)), qr), -qe);")
        else:
            w("int32x4_t v = acc;")
            requant(w, "v", fast)
        _clamp_store(w, vec, at, count)
        return
    _lanes(w, at, count, store, doubled)


def _clamp_store(w: CWriter, vec: tuple[int, int, int], at: str, count: int) -> None:
    """``v`` plus z_y, clamped to the chain's range and stored (``count`` lanes) at ``at``."""
    zy, lo, hi = vec
    add = f"vaddq_n_s32(v, {zy})" if zy else "v"
    w(f"v = vminq_s32(vmaxq_s32({add}, vdupq_n_s32({lo})), vdupq_n_s32({hi}));")
    w(f"vstrbq_s32(yr + {at}, v);" if count == LANES else
      f"vstrbq_p_s32(yr + {at}, v, opfuse_pred(0x{(1 << (4 * count)) - 1:04x}u));")


def _lanes(w: CWriter, at: str, count: int, store: Callable[..., None], doubled: bool) -> None:
    """The sums of ``acc`` stored lane by lane through the kernel's scalar ``store``."""
    for d in range(count):
        w.open("")
        w(f"const int32_t a{d} = vgetq_lane_s32(acc, {d});")
        store(f"a{d}", f"{at} + {d}", doubled)
        w.close()
