"""int8 Conv (not depthwise) and Gemm/MatMul with constant weights as x86 SIMD micro-kernels:
``vpdpbusd`` (4 int8 products per int32 lane) on zmm or ymm, or exact ``vpmaddwd`` on AVX2
(x86/helpers.py), each branch under the compiler's feature macros, the portable C of conv.py in
the ``#else`` (one generated project builds everywhere). Bit-exact with the portable C and
TFLite Micro: integer arithmetic throughout, the same int32 sums.

How one (group of a) conv is computed:

* staging: the group's input is copied once into ``xs``, ``[ICp/4][IHp][IWp][4]`` bytes (each
  pixel's 4 channels of a quad together, the channels padded to a multiple of 4; SSE2
  unpacks interleave 4 channel rows), as unsigned bytes ``u = x + 128``
  (int8; uint8 as is), the padding ``u(z_x)``. Then every tap of every output pixel is a plain
  read, with no bounds test;
* ``vpdpbusd`` multiplies u8 by s8: ``sum (x - z_x) w = sum u w - (128 + z_x) sum w`` (int8), so
  the correction is folded into the int32 bias at generation time, for every tap of the window
  (a padded tap reads ``u(z_x)``: ``u(z_x) w - (128 + z_x) w = 0``, TFLite's "contributes
  nothing"); the padded channels have zero weights;
* the micro-kernel: ``P`` output pixels x ``NB`` vectors of output channels in registers; per
  tap and 4 input channels, ``NB`` weight vectors (packed ``[group][tap][ICp/4][OCp][4]``,
  ``OCp`` the group's channels padded to 16) against a 4-byte broadcast of each pixel;
* the epilogue: tflite rounding in vectors (``opfuse_x86_rq*``, per-channel multipliers and
  shifts padded to ``OCp``) into ``tmp[P][OCp]``; then per channel and pixel the int8 epilogue
  chain (if any) and the store into the NCHW output (onnx rounding: the scalar requantization
  there).

AVX2 without VNNI (int8 input, no weight of -128) stages x as it is, the padding ``z_x``, its bias
``b - z_x sum w`` (``Arrays.signed``), and multiplies by sign and magnitude as x86/gemv.py does:
``vpmaddubsw(|x|, vpsignb(w, x))`` (pair sums at most 2 * 128 * 127, exact) widened by
``vpmaddwd`` with ones, 4 operations a weight vector where ``opfuse_x86_dot8`` takes 4 and the
unpacking of both sides; the other branches keep ``u``. A weight of -128 keeps dot8 and ``u``.

A 1x1 stride-1 unpadded conv (and a Gemm: its rows are the pixels, already pixel-major) is one
row of all its pixels. Chosen by the x86 ISA record (``IsaKernels.conv8``/``gemm8`` of isa/x86).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.ctype import INT8, INT32
from opfuse.backends.c.isa.x86 import helpers as hx
from opfuse.quant import multipliers

STAGE_LIMIT = 128 * 1024  # bytes of the staged input on the stack, at most
P_MAX = {"zmm": 8, "ymm_vnni": 6, "avx2": 4}  # pixels per register block
ACC_REGS = {"zmm": 24, "ymm_vnni": 12, "avx2": 8}  # accumulators per register block, at most
LANES = {"zmm": 16, "ymm_vnni": 8, "avx2": 8}
GUARDS = (("zmm", hx.ZMM), ("ymm_vnni", hx.YMM_VNNI), ("avx2", hx.AVX2))
SM8 = "sm8"  # emit_dots' AVX2 dot of signed bytes by sign and magnitude (module docstring)


def _up(v: int, m: int) -> int:
    return -(-v // m) * m


@dataclass(frozen=True)
class Core:
    """One group's geometry as the micro-kernel reads it (module docstring)."""

    group: int
    icg: int
    ocg: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    rows: int  # output rows computed (1 for a flattened pointwise conv or a Gemm)
    cols: int  # output pixels per row
    ihp: int  # staged rows, columns
    iwp: int
    quad: bool = False  # one input channel: 4 taps along a row per 4 bytes (module docstring)

    @property
    def icp(self) -> int:
        return 4 if self.quad else _up(self.icg, 4)

    @property
    def kwl(self) -> int:
        """Iterations of the kw loop: taps, or quads of taps."""
        return -(-self.kw // 4) if self.quad else self.kw

    @property
    def px(self) -> int:
        """Bytes from a staged column to the next."""
        return 1 if self.quad else 4

    @property
    def rowb(self) -> int:
        """Bytes from a staged row to the next (3 more columns for a quad's last bytes)."""
        return self.iwp + 3 if self.quad else self.iwp * 4

    @property
    def ocp(self) -> int:
        return _up(self.ocg, 16)

    @property
    def stage_bytes(self) -> int:
        return self.ihp * self.rowb if self.quad else self.ihp * self.iwp * self.icp


@dataclass(frozen=True)
class Arrays:
    """The generation-time arrays of one kernel in weights.c (C pointers)."""

    w: str  # packed weights
    b: str  # corrected bias, [group*OCp]
    m: str | None  # multipliers, shifts [group*OCp] (tflite rounding)
    s: str | None
    pad: int  # the staged byte of the input's zero point
    flip: bool  # int8 input: stage x ^ 0x80
    short: bool = False  # every sum below 2^30, every shift a right shift: opfuse_x86_rq16r
    sb: str | None = None  # AVX2: the bias of a signed staging, b - z_x sum w (int8, no -128)
    spad: int = 0  # its pad byte, z_x
    sm: bool = False  # these arrays are that staging's: the AVX2 dots by sign and magnitude

    def signed(self) -> Arrays:
        """The AVX2 branch's arrays: its own staging, x as it is (padding z_x), and its bias
        (module docstring); these arrays where there is none (a uint8 input, a weight of -128)."""
        if self.sb is None:
            return self
        return replace(self, b=self.sb, pad=self.spad, flip=False, sm=True)


def pack(params, key: str, core: Core, wt: np.ndarray, bias: np.ndarray, zx: int,  # noqa: ANN001
         signed: bool, real: np.ndarray | None,
         order: tuple[tuple[int, int], ...] | None = None) -> Arrays | None:
    """Store the packed weights, the corrected bias and (tflite) the padded multipliers;
    ``wt`` is [OC][ICg][KH][KW] int8. None if the vector requantization could not be exact.
    ``order``: a 1x1 single-group core's weights in the GEMV's order instead (x86/gemv.py),
    ``[K/4][channels][4]`` per block of (first channel, channels), under a key of their own."""
    g, taps = core.group, core.kh * core.kw
    if core.quad:  # [g][OCp][KH][quads*4]: the "channels" of a quad are 4 taps of a row
        w5 = np.zeros((g, core.ocp, core.kh, core.kwl * 4), np.int64)
        w5[:, : core.ocg, :, : core.kw] = wt.astype(np.int64).reshape(g, core.ocg, core.kh,
                                                                     core.kw)
        w5 = w5.reshape(g, core.ocp, core.kh, core.kwl, 4).transpose(0, 1, 4, 2, 3).reshape(
            g, core.ocp, 4, core.kh * core.kwl)
        taps = core.kh * core.kwl
    else:
        w5 = np.zeros((g, core.ocp, core.icp, taps), np.int64)
        w5[:, : core.ocg, : core.icg] = wt.astype(np.int64).reshape(g, core.ocg, core.icg, taps)
    off = zx + 128 if signed else zx
    bias_p = np.zeros((g, core.ocp), np.int64)
    bias_p[:, : core.ocg] = bias.reshape(g, core.ocg)
    bias_p -= off * w5.sum(axis=(2, 3))
    bound = np.abs(bias_p) + 255 * np.abs(w5).sum(axis=(2, 3))  # |sum|: bytes u in [0, 255]
    sbias = bias_p + 128 * w5.sum(axis=(2, 3))  # b - z_x sum w: the signed staging's (int8)
    bias_p = ((bias_p + 2**31) % 2**32 - 2**31).astype(np.int32)  # int32 wraps as TFLite's sums
    packed = w5.reshape(g, core.ocp, core.icp // 4, 4, taps).transpose(0, 4, 2, 1, 3)
    wkey = f"{key}:x86w"
    if order is not None:  # [block][K/4][channels][4]
        wk = w5[0, :, :, 0].reshape(core.ocp, core.icp // 4, 4)
        packed = np.concatenate([wk[c0:c0 + cs].transpose(1, 0, 2).ravel() for c0, cs in order])
        wkey = f"{key}:x86gw"
    m_arr = s_arr = None
    short = False
    if real is not None:
        m, s = multipliers(np.broadcast_to(np.atleast_1d(real), (g * core.ocg,)))
        if (m == np.iinfo(np.int32).min).any() or (s < -31).any() or (s > 31).any():
            return None
        mp = np.zeros((g, core.ocp), np.int32)
        sp = np.zeros((g, core.ocp), np.int32)
        mp[:, : core.ocg], sp[:, : core.ocg] = m.reshape(g, -1), s.reshape(g, -1)
        short = bool((bound < 2**30).all() and (s < 0).all())
        m_arr = params.weight(f"{key}:x86rqm", mp.ravel(), INT32)
        s_arr = params.weight(f"{key}:x86rqs", sp.ravel(), INT32)
    sb = None
    if signed and not (w5 == -128).any():  # vpsignb cannot negate -128 (the GEMV's too)
        sb = params.weight(f"{key}:x86sb", ((sbias + 2**31) % 2**32 - 2**31).astype(np.int32)
                           .ravel(), INT32)
    return Arrays(params.weight(wkey, packed.astype(np.int8).ravel(), INT8),
                  params.weight(f"{key}:x86b", bias_p.ravel(), INT32), m_arr, s_arr,
                  off & 0xFF, signed, short, sb, zx & 0xFF)


def _blocking(isa: str, core: Core) -> tuple[int, int]:
    """(pixels, channel vectors) of the register block."""
    lanes = LANES[isa]
    nv = core.ocp // lanes
    p = min(P_MAX[isa], core.cols)
    cap = ACC_REGS[isa] if core.cols > 1 else 8
    nb = next(b for b in (8, 4, 3, 2, 1) if nv % b == 0 and b * p <= cap)
    return p, nb


def _block(w: CWriter, isa: str, core: Core, a: Arrays, p: int, nb: int, rq: str | None,
           zy: int, lo: int, hi: int) -> None:
    """Output pixels ``ow0 .. ow0+p-1`` of row ``oh`` for all channels of group ``grp``, into
    ``tmp[p][OCp]`` (requantized and clamped if ``rq``)."""
    lanes = LANES[isa]
    z = "zmm" if isa == "zmm" else "ymm"
    vt = "__m512i" if z == "zmm" else "__m256i"
    ld = "_mm512_loadu_si512" if z == "zmm" else "_mm256_loadu_si256"
    st = "_mm512_storeu_si512" if z == "zmm" else "_mm256_storeu_si256"
    cast = "(const void *)" if z == "zmm" else "(const __m256i *)"
    scast = "(void *)" if z == "zmm" else "(__m256i *)"
    bc = "_mm512_set1_epi32" if z == "zmm" else "_mm256_set1_epi32"
    dot = "opfuse_x86_dot16" if z == "zmm" else SM8 if a.sm else "opfuse_x86_dot8"
    rqf = "opfuse_x86_rq16" if z == "zmm" else "opfuse_x86_rq8"
    step = nb * lanes
    w.open(f"for (int ob = 0; ob < {core.ocp // step}; ++ob)")
    w(f"const int c0 = grp*{core.ocp} + ob*{step};")
    for v in range(nb):
        w(f"const {vt} b{v} = {ld}({cast}({a.b} + c0 + {v * lanes}));")
        for q in range(p):
            w(f"{vt} a{q}_{v} = b{v};")
    w(f"const uint8_t *xb = xs + oh*{core.sh * core.rowb} + ow0*{core.sw * core.px};")
    w(f"const int8_t *wb = {a.w} + grp*{core.kh * core.kwl * core.icp * core.ocp} + "
      f"ob*{step * 4};")
    taps = core.kh * core.kwl > 1
    if taps:
        w.open(f"for (int kh = 0; kh < {core.kh}; ++kh)")
        w.open(f"for (int kw = 0; kw < {core.kwl}; ++kw)")
        w(f"const uint8_t *xt = xb + kh*{core.dh * core.rowb} + kw*{4 if core.quad else core.dw * 4};")
        w(f"const int8_t *wt = wb + (kh*{core.kwl} + kw)*{core.icp * core.ocp};")
    else:
        w("const uint8_t *xt = xb;")
        w("const int8_t *wt = wb;")
    if a.sm:
        w("const __m256i one = _mm256_set1_epi16(1);")
    w.open(f"for (int c4 = 0; c4 < {core.icp // 4}; ++c4)")
    emit_dots(w, vt, dot, [f"{bc}(opfuse_x86_ld32(xt + {q * core.sw * core.px} + "
                           f"c4*{core.ihp * core.iwp * 4}))" for q in range(p)],
              [f"{ld}({cast}(wt + c4*{core.ocp * 4} + {v * lanes * 4}))" for v in range(nb)],
              spread="x")
    w.close()
    if taps:
        w.close()
        w.close()
    once = rq is not None and isa == "zmm" and a.short and lo >= zy and p > 1  # 1 pixel: setup > gain
    for v in range(nb):
        if rq:
            w(f"const {vt} m{v} = {ld}({cast}({a.m} + c0 + {v * lanes}));")
            w(f"const {vt} s{v} = {ld}({cast}({a.s} + c0 + {v * lanes}));")
        if once:
            once_lanes(w, v)
        for q in range(p):
            val = f"{rqf}(a{q}_{v}, m{v}, s{v}, {zy}, {lo}, {hi})" if rq else f"a{q}_{v}"
            if once:
                val = once_value(f"a{q}_{v}", v, zy, lo, hi)
            w(f"{st}({scast}(tmp[{q}] + ob*{step} + {v * lanes}), {val});")
    w.close()


def once_value(acc: str, v: int, zy: int | str, lo: int | str, hi: int | str) -> str:
    """The requantized, clamped zmm of ``acc`` by ``once_lanes``' constants of vector ``v``."""
    return (f"_mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(_mm512_mask_blend_epi32("
            f"(__mmask16)0xAAAA, _mm512_srav_epi64(_mm512_add_epi64(_mm512_mul_epi32("
            f"{acc}, m{v}), re{v}), ne{v}), _mm512_srav_epi64(_mm512_add_epi64("
            f"_mm512_mul_epi32(_mm512_srli_epi64({acc}, 32), mo{v}), ro{v}), no{v})), "
            f"_mm512_set1_epi32({zy})), _mm512_set1_epi32({lo})), _mm512_set1_epi32({hi}))")


def once_lanes(w: CWriter, v: int) -> None:
    """x86/lanes.py's one rounding (``one_rounding``: a Relu with lo >= z_y, every shift a
    right shift, every sum below 2^30) with a multiplier and shift per lane: per 64-bit lane
    of the even channels the count ``31 + e`` and the constant ``2^30 + 2^(30+e)``, of the odd
    channels ``e - 1`` (the result lands in the high dword) and theirs; the odd multipliers
    moved down. Padded channels (shift 0) compute garbage that is never stored."""
    w(f"const __m512i e{v} = _mm512_sub_epi32(_mm512_setzero_si512(), s{v}), "
      f"one{v}_ = _mm512_set1_epi64(1), half{v}_ = _mm512_set1_epi64((long long)1 << 30);")
    w(f"const __m512i ne{v} = _mm512_and_si512(_mm512_add_epi32(e{v}, _mm512_set1_epi32(31)), "
      "_mm512_set1_epi64(0xFFFFFFFFLL));")
    w(f"const __m512i no{v} = _mm512_srli_epi64(_mm512_sub_epi32(e{v}, _mm512_set1_epi32(1)), "
      "32);")
    w(f"const __m512i re{v} = _mm512_add_epi64(_mm512_sllv_epi64(one{v}_, _mm512_sub_epi64("
      f"ne{v}, one{v}_)), half{v}_);")
    w(f"const __m512i ro{v} = _mm512_add_epi64(_mm512_sllv_epi64(one{v}_, _mm512_add_epi64("
      f"no{v}, _mm512_set1_epi64(31))), half{v}_);")
    w(f"const __m512i mo{v} = _mm512_srli_epi64(m{v}, 32);")


def emit_dots(w: CWriter, vt: str, dot: str, xs: list[str], ws: list[str], spread: str) -> None:
    """One step of a register block of dot products: ``a<i>_<j> = dot(a<i>_<j>, x<i>, w<j>)``
    for every input vector ``x<i>`` (unsigned bytes, the C expressions ``xs``) and weight vector
    ``w<j>`` (signed, ``ws``). The side that is not ``spread`` is loaded first, then each vector
    of the ``spread`` side (a broadcast) followed by its dots with all of the loaded side: here
    a pixel's 4 bytes against the channel vectors (``spread="x"``); x86/lanes.py's other block,
    a channel's 4 weights against the pixel vectors (``spread="w"``)."""
    x_spread = spread == "x"
    held = ws if x_spread else xs
    for i, e in enumerate(held):
        w(f"const {vt} {'w' if x_spread else 'x'}{i} = {e};")
    for j, e in enumerate(xs if x_spread else ws):
        w(f"const {vt} {spread}{j} = {e};")
        if dot == SM8:  # signed x: |x| once a vector (the block declared ``one``)
            w(f"const {vt} u{j} = _mm256_abs_epi8(x{j});")
        for i in range(len(held)):
            xi, wi = (j, i) if x_spread else (i, j)
            w(f"a{xi}_{wi} = _mm256_add_epi32(a{xi}_{wi}, _mm256_madd_epi16(_mm256_maddubs_epi16("
              f"u{xi}, _mm256_sign_epi8(w{wi}, x{xi})), one)); OPFUSE_X86_KEEP(a{xi}_{wi});"
              if dot == SM8 else
              f"a{xi}_{wi} = {dot}(a{xi}_{wi}, x{xi}, w{wi});")


def emit_core(w: CWriter, core: Core, a: Arrays, stage: Callable[[CWriter, Arrays], None],
              store: Callable[[CWriter, int, str], None], vector_rq: bool, zy: int, lo: int,
              hi: int, batch: int = 1, row: Callable[[CWriter, str], None] | None = None,
              row_for: Callable[[str], bool] = lambda isa: True, skip: tuple[str, ...] = (),
              opened: bool = False) -> None:
    """The SIMD branches of one kernel over ``n`` < ``batch`` and ``grp``: ``stage(w, a)``
    fills ``xs`` for group ``grp`` as the branch's arrays ``a`` say (AVX2: ``Arrays.signed``), ``store(w, p, isa)`` writes ``tmp[0..p-1]`` of the block at
    (``oh``, ``ow0``) (module docstring); or, with ``row``, the blocks fill ``rb[OCg][cols]``
    and ``row(w, isa)`` writes output row ``oh`` from it (an epilogue chain then runs along the
    row's pixels, as the portable C's does) on the branches ``row_for(isa)`` admits. Then
    ``#else`` (the caller writes the portable C and ``#endif``). The branches of ``skip`` are
    not written (``opened``: the caller wrote a branch of its own first)."""
    for k, (isa, guard) in enumerate((i, g) for i, g in GUARDS if i not in skip):
        w.lines.append(f"#{'if' if k == 0 and not opened else 'elif'} {guard}")
        p, nb = _blocking(isa, core)
        ab = a.signed() if isa == "avx2" else a
        by_row = row if row_for(isa) else None
        w.open("")
        if ab.sm:  # helpers.KEEP: the accumulators held in registers
            for line in hx.KEEP:
                w(line)
        w(f"uint8_t xs[{core.stage_bytes}] __attribute__((aligned(64)));")
        w(f"int32_t tmp[{p}][{core.ocp}] __attribute__((aligned(64)));")
        if by_row is not None:
            w(f"int32_t rb[{core.ocg}][{core.cols}];")
        w.open(f"for (int n = 0; n < {batch}; ++n)")
        w.open(f"for (int grp = 0; grp < {core.group}; ++grp)")
        stage(w, ab)
        w.open(f"for (int oh = 0; oh < {core.rows}; ++oh)")
        full, rest = divmod(core.cols, p)
        for count, start, width in ((full, 0, p), (1 if rest else 0, full * p, rest)):
            if not count:
                continue
            w.open(f"for (int t = 0; t < {count}; ++t)")
            w(f"const int ow0 = {start} + t*{width};")
            _block(w, isa, core, ab, width, nb if width == p else _blocking(isa, _narrow(core,
                   width))[1], "rq" if vector_rq else None, zy, lo, hi)
            if by_row is None:
                store(w, width, isa)
            else:
                w(f"for (int o = 0; o < {core.ocg}; ++o) for (int q = 0; q < {width}; ++q) "
                  "rb[o][ow0 + q] = tmp[q][o];")
            w.close()
        if by_row is not None:
            by_row(w, isa)
        w.close()
        w.close()
        w.close()
        w.close()
    w.lines.append("#else")


def emit_store_t8(w: CWriter, core: Core, yb: str, plane: int, p: int = 8) -> None:
    """zmm, ``p`` <= 8 pixels of every channel (``tmp``, final values) into NCHW bytes: per 16
    channels an 8 x 16 byte transpose (SSE2 unpacks), one 8-byte (or masked ``p``-byte) store
    per channel at ``yb + o*plane``."""
    def group(o16: str, count: int) -> None:
        for q in range(8):
            w(f"const __m128i r{q} = _mm512_cvtepi32_epi8(_mm512_load_si512((const void *)"
              f"(tmp[{q}] + {o16})));" if q < p else f"const __m128i r{q} = _mm_setzero_si128();")
        for j in range(4):
            w(f"const __m128i a{2 * j} = _mm_unpacklo_epi8(r{2 * j}, r{2 * j + 1}), "
              f"a{2 * j + 1} = _mm_unpackhi_epi8(r{2 * j}, r{2 * j + 1});")
        pairs = ((0, 2), (1, 3), (4, 6), (5, 7))
        for j, (u, v) in enumerate(pairs):
            w(f"const __m128i b{2 * j} = _mm_unpacklo_epi16(a{u}, a{v}), "
              f"b{2 * j + 1} = _mm_unpackhi_epi16(a{u}, a{v});")
        # b0..b3: channels 0-3, 4-7, 8-11, 12-15 of pixels 0-3; b4..b7: of pixels 4-7
        for j in range(4):
            w(f"const __m128i e{2 * j} = _mm_unpacklo_epi32(b{j}, b{j + 4}), "
              f"e{2 * j + 1} = _mm_unpackhi_epi32(b{j}, b{j + 4});")
        if count < 16:
            w(" ".join(f"(void)e{j};" for j in range(8)))
        for c in range(count):
            e = f"e{c // 2}" if c % 2 == 0 else f"_mm_unpackhi_epi64(e{c // 2}, e{c // 2})"
            at = f"yb + ({o16} + {c})*{plane}"
            w(f"_mm_storel_epi64((__m128i *)({at}), {e});" if p == 8 else
              f"_mm_mask_storeu_epi8({at}, (__mmask16){(1 << p) - 1}, {e});")

    w.open("")
    w(f"uint8_t *yb = (uint8_t *)({yb});")
    if core.ocg >= 16:
        w.open(f"for (int o16 = 0; o16 < {core.ocg - core.ocg % 16}; o16 += 16)")
        group("o16", 16)
        w.close()
    if core.ocg % 16:
        w.open("")
        group(str(core.ocg - core.ocg % 16), core.ocg % 16)
        w.close()
    w.close()


def _narrow(core: Core, cols: int) -> Core:
    from dataclasses import replace

    return replace(core, cols=cols)
