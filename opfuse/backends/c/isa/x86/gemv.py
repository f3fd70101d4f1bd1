"""A batch-1 int8 fully connected layer as an x86 GEMV: one row of K input bytes against N
output channels (opfuse/kernelplan/conv8.py, ``uses_gemv8`` and ``gemv_blocks``).

The conv core (x86/core.py) keeps a register block of up to 8 pixels x channel vectors; for one
row it holds a single pixel, stages the row byte by byte and stores its sums through a scratch
row, which cost more than the dot products of a small layer. Here:

* the row is not staged: each step reads one 4-byte group of it and broadcasts it
  (``x ^ 0x80`` in a scalar register for an int8 row: vpdpbusd multiplies unsigned by signed
  bytes; the correction ``(128 + z_x) sum w`` is folded into the bias at generation time, as the
  core does); the last, partial group is copied into a zeroed word (its padded weights are 0);
* the weights are packed at generation time in the order the kernel streams them
  (``core.pack(order=...)``): per block of output channels, ``[K/4][channels][4]``, so a block
  reads one contiguous stream;
* a block's accumulators (its channel vectors x the plan's chains over K: interleaved 4-byte
  steps, summed at the end) are independent, so vpdpbusd's latency is hidden even for a layer of
  8 or 16 outputs;
* the requantization is ``opfuse_x86_rq16``/``rq8`` (TFLite's, bit-exact; per-tensor on zmm
  ``rq16r``/``rq16s`` with one broadcast multiplier), then bytes converted in registers and
  stored plainly, a partial vector by ``memcpy`` (the next layer's scalar loads forward from
  such stores, not from vpmovdb's or a masked store's).

Branches: zmm (AVX-512 VNNI) runs the plan's blocks whole; ymm (AVX-VNNI, or AVX2) runs each
block in parts of at most GEMV_YMM_ACC vectors, reading the same packing with the block's stride.
AVX2 without VNNI on an int8 row multiplies by sign and magnitude: ``|x|`` (unsigned, <= 128)
by ``w * sign(x)`` (vpsignb; |w| <= 127) in vpmaddubsw, whose pair sums (<= 2 * 128 * 127)
cannot saturate, widened by vpmaddwd with ones: 4 operations per 32 products where the
even/odd vpmaddwd of ``opfuse_x86_dot8`` takes 7; the row is read signed, so its bias is
``b - z_x sum w`` (``Arrays.sb``, core.pack's bias of the signed staging). A weight of -128 keeps dot8.
"""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86 import helpers as hx
from opfuse.backends.c.isa.x86.core import Arrays
from opfuse.kernelplan.conv8 import GEMV_ACC, GEMV_YMM_ACC, GemvPlan

GUARDS = (("zmm", hx.ZMM), ("ymm_vnni", hx.YMM_VNNI), ("avx2", hx.AVX2))


def _part(w: CWriter, isa: str, plan: GemvPlan, a: Arrays, x: str, y: str, yct: str,
          woff: int, stride: int, c0: int, nv: int, zy: int, lo: int, hi: int,
          uniform: bool, sbias: str | None) -> None:
    """Channels ``c0 .. c0 + nv*lanes - 1``: their weights at ``woff``, ``stride`` bytes per
    4-byte step of K; ``uniform``: one multiplier and shift for all (per-tensor weights);
    ``sbias``: AVX2 on a signed row by sign and magnitude (module docstring)."""
    sbias = sbias if isa == "avx2" else None
    z = isa == "zmm"
    lanes = 16 if z else 8
    vt = "__m512i" if z else "__m256i"
    ld = "_mm512_loadu_si512((const void *)" if z else "_mm256_loadu_si256((const __m256i *)"
    bc = "_mm512_set1_epi32" if z else "_mm256_set1_epi32"
    dot = "opfuse_x86_dot16" if z else "opfuse_x86_dot8"
    ch = plan.chains(nv, GEMV_ACC if z else GEMV_YMM_ACC)
    w.open("")
    w(f"const int8_t *wb = {a.w} + {woff};")
    if sbias:
        w("const __m256i one = _mm256_set1_epi16(1);")
    for j in range(ch):
        for v in range(nv):
            init = f"{ld}({sbias or a.b} + {c0 + v * lanes}))" if j == 0 else (
                "_mm512_setzero_si512()" if z else "_mm256_setzero_si256()")
            w(f"{vt} a{j}_{v} = {init};")

    flip = " ^ (int32_t)0x80808080" if a.flip and not sbias else ""

    def step(j: int, at: str, word: str | None = None) -> None:
        word = word or f"opfuse_x86_ld32({x} + ({at})*4){flip}"
        w(f"const {vt} x{j} = {bc}({word});")
        if sbias:
            w(f"const __m256i u{j} = _mm256_abs_epi8(x{j});")
        for v in range(nv):
            wv = f"{ld}(wb + ({at})*{stride} + {v * lanes * 4}))"
            w(f"a{j}_{v} = _mm256_add_epi32(a{j}_{v}, _mm256_madd_epi16(_mm256_maddubs_epi16("
              f"u{j}, _mm256_sign_epi8({wv}, x{j})), one));" if sbias else
              f"a{j}_{v} = {dot}(a{j}_{v}, x{j}, {wv});")

    kf = plan.k // 4  # whole 4-byte groups of the row
    whole = kf - kf % ch
    if whole:
        w.open(f"for (int k4 = 0; k4 < {whole}; k4 += {ch})")
        for j in range(ch):
            step(j, f"k4 + {j}" if j else "k4")
        w.close()
    for j in range(kf % ch):
        step(j, str(whole + j))
    if plan.k % 4:  # the last group's bytes past the row: any value (their weights are 0)
        w("int32_t t = 0;")
        w(f"memcpy(&t, {x} + {kf * 4}, {plan.k % 4});")
        step(kf % ch, str(kf), f"t{flip}")
    add = "_mm512_add_epi32" if z else "_mm256_add_epi32"
    rq = "opfuse_x86_rq16" if z else "opfuse_x86_rq8"
    if z and uniform:  # one multiplier and shift: broadcast once, the shifts by a count
        w(f"const __m512i m_ = _mm512_set1_epi32({a.m}[0]);")
        w(f"const int s_ = {a.s}[0];")
    for v in range(nv):
        acc = f"a0_{v}"
        for j in range(1, ch):
            acc = f"{add}({acc}, a{j}_{v})"
        c = c0 + v * lanes
        if z and uniform:
            w(f"const __m512i r{v} = opfuse_x86_rq16r({acc}, m_, -s_, {zy}, {lo}, {hi});"
              if a.short else f"const __m512i r{v} = opfuse_x86_rq16s({acc}, m_, s_ > 0 ? s_ : 0, "
              f"s_ < 0 ? -s_ : 0, {zy}, {lo}, {hi});")
        else:
            w(f"const {vt} r{v} = {rq}({acc}, {ld}({a.m} + {c})), {ld}({a.s} + {c})), {zy}, "
              f"{lo}, {hi});")
        count = min(lanes, plan.n - c)
        # bytes converted in a register and stored plainly: the next layer's scalar loads of
        # them forward from such stores (not from vpmovdb's or a masked store)
        w.open("")
        if z:
            w(f"const __m128i q = _mm512_cvtepi32_epi8(r{v});")
        else:
            pk = "_mm_packus_epi16" if yct == "uint8_t" else "_mm_packs_epi16"
            w(f"const __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(r{v}), "
              f"_mm256_extracti128_si256(r{v}, 1));")
            w(f"const __m128i q = {pk}(p, p);")
        if count == 16:
            w(f"_mm_storeu_si128((__m128i *)({y} + {c}), q);")
        elif count == 8:
            w(f"_mm_storel_epi64((__m128i *)({y} + {c}), q);")
        else:
            if count > 8:
                w(f"_mm_storel_epi64((__m128i *)({y} + {c}), q);")
            w(f"const long long b8 = _mm_cvtsi128_si64({'q' if count < 8 else '_mm_unpackhi_epi64(q, q)'});")
            w(f"memcpy({y} + {c + (8 if count > 8 else 0)}, &b8, {count % 8});")
        w.close()
    w.close()


def emit_gemv(w: CWriter, plan: GemvPlan, a: Arrays, x: str, y: str, yct: str, zy: int,
              lo: int, hi: int, uniform: bool = False) -> None:
    """The SIMD branches of the GEMV (module docstring), ending in ``#else`` (the caller writes
    the portable C and ``#endif``); ``uniform``: per-tensor requantization (zmm: the shifts by
    a count, ``opfuse_x86_rq16r`` where ``a.short`` bounds the sums). Where ``a.sb`` holds the
    signed row's bias (an int8 row, no weight of -128), the AVX2 branch multiplies by sign and
    magnitude."""
    for k, (isa, guard) in enumerate(GUARDS):
        w.lines.append(f"#{'if' if k == 0 else 'elif'} {guard}")
        z = isa == "zmm"
        w.open("")
        if z:
            w(f"/* batch-1 GEMV (isa/x86/gemv.py): blocks of {', '.join(str(cs) for _, cs in plan.blocks)}"
              " channels */")
        xs = f"(const uint8_t *)({x})"
        lanes = 16 if z else 8
        for c0, cs in plan.blocks:
            woff, stride = c0 * plan.k4 * 4, cs * 4
            nv = cs // lanes
            part = nv if z else GEMV_YMM_ACC
            for p0 in range(0, nv, part):
                live = -(-(plan.n - c0 - p0 * lanes) // lanes)  # vectors not all padding
                pv = min(part, nv - p0, live)
                if pv <= 0:
                    continue
                _part(w, isa, plan, a, xs, y, yct, woff + p0 * lanes * 4, stride,
                      c0 + p0 * lanes, pv, zy, lo, hi, uniform, a.sb)
        w.close()
    w.lines.append("#else")
