"""The float tile store of convdirect.py in vectors (``IsaKernels.tile_transpose``): a register
tile ``acc[pt][ocv]`` (output pixels x output channels, the channels in vector lanes) goes to
NCHW, channel ``o``'s ``pt`` pixels contiguous at ``dst + o*stride``. The portable C stores it
element by element (a transpose the compiler does not vectorize: on a Zen 4 host it took 40% of
ResNet-8's 16-channel 3x3 conv); here 16 x 16 blocks are transposed in zmm registers
(``unpack``/``shuffle_ps``/``shuffle_f32x4``, 64 shuffles for 256 values) and stored as one zmm
(16 pixels), one ymm (8) or a masked zmm (2-15) per channel, under ``__AVX512F__``; with AVX2 only, 8 x 8
blocks of ymm registers (``unpack``/``shuffle_ps``/``permute2f128``); the portable C in the
``#else``.

Which register ends up holding which channel is not written by hand: ``_network`` runs the
shuffles on (pixel, channel) labels at generation time and the store of each register follows
from that simulation (a register that is not one channel's pixels in order is an error)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.helpers import NO

GUARD = f"{NO} && defined(__AVX512F__)"
Lanes = list[tuple[int, int]]


def _unpack(a: Lanes, b: Lanes, hi: bool) -> Lanes:
    out = []
    for k in range(len(a) // 4):
        base = 4 * k + (2 if hi else 0)
        out += [a[base], b[base], a[base + 1], b[base + 1]]
    return out


def _shuffle_ps(a: Lanes, b: Lanes, imm: int) -> Lanes:
    out = []
    for k in range(len(a) // 4):
        out += [a[4 * k + (imm & 3)], a[4 * k + (imm >> 2 & 3)], b[4 * k + (imm >> 4 & 3)],
                b[4 * k + (imm >> 6 & 3)]]
    return out


def _shuffle_x4(a: Lanes, b: Lanes, imm: int) -> Lanes:
    def lane(r: Lanes, k: int) -> Lanes:
        return r[4 * k: 4 * k + 4]
    return (lane(a, imm & 3) + lane(a, imm >> 2 & 3) + lane(b, imm >> 4 & 3) +
            lane(b, imm >> 6 & 3))


def _network() -> tuple[list[str], dict[int, str]]:
    """The C of a 16 x 16 transpose of registers ``r0..r15`` (row p = pixel p's 16 channels)
    and, per channel, the register that holds its 16 pixels in order."""
    regs: dict[str, Lanes] = {f"r{p}": [(p, c) for c in range(16)] for p in range(16)}
    lines = []

    def op(name: str, c: str, value: Lanes) -> None:
        regs[name] = value
        lines.append(f"const __m512 {name} = {c};")

    for j in range(8):  # pairs of rows, interleaved within 128-bit lanes
        a, b = f"r{2 * j}", f"r{2 * j + 1}"
        op(f"t{2 * j}", f"_mm512_unpacklo_ps({a}, {b})", _unpack(regs[a], regs[b], False))
        op(f"t{2 * j + 1}", f"_mm512_unpackhi_ps({a}, {b})", _unpack(regs[a], regs[b], True))
    for j in range(4):  # quads of rows
        for h in range(2):
            a, b = f"t{4 * j + h}", f"t{4 * j + h + 2}"
            for k, imm in enumerate((0x44, 0xEE)):
                op(f"u{4 * j + 2 * h + k}", f"_mm512_shuffle_ps({a}, {b}, {imm:#x})",
                   _shuffle_ps(regs[a], regs[b], imm))
    for i, j in enumerate((0, 1, 2, 3, 8, 9, 10, 11)):  # 128-bit lanes: rows 0-3 with 4-7, 8-11
        a, b = f"u{j}", f"u{j + 4}"                      # with 12-15
        for k, imm in enumerate((0x88, 0xDD)):
            op(f"v{2 * i + k}", f"_mm512_shuffle_f32x4({a}, {b}, {imm:#x})",
               _shuffle_x4(regs[a], regs[b], imm))
    finals: dict[int, str] = {}
    # the last stage pairs each v with the one that holds the same channels of the other rows
    pending = [f"v{i}" for i in range(16)]
    used: set[str] = set()
    n = 0
    for a in pending:
        if a in used:
            continue
        chans = {c for _, c in regs[a]}
        b = next(x for x in pending if x != a and x not in used and {c for _, c in regs[x]} == chans)
        used |= {a, b}
        for imm in (0x88, 0xDD):
            name = f"z{n}"
            n += 1
            op(name, f"_mm512_shuffle_f32x4({a}, {b}, {imm:#x})", _shuffle_x4(regs[a], regs[b], imm))
            channels = {c for _, c in regs[name]}
            pixels = [p for p, _ in regs[name]]
            if len(channels) != 1 or pixels != list(range(16)):
                raise AssertionError(f"transpose network: {name} holds {regs[name]}")
            finals[channels.pop()] = name
    if sorted(finals) != list(range(16)):
        raise AssertionError("transpose network: a channel is missing")
    return lines, finals


def _permute2f128(a: Lanes, b: Lanes, imm: int) -> Lanes:
    halves = [a[:4], a[4:], b[:4], b[4:]]
    return halves[imm & 3] + halves[imm >> 4 & 3]


def _network8() -> tuple[list[str], dict[int, str]]:
    """The same for AVX2: an 8 x 8 transpose of ymm registers ``r0..r7``."""
    regs: dict[str, Lanes] = {f"r{p}": [(p, c) for c in range(8)] for p in range(8)}
    lines = []

    def op(name: str, c: str, value: Lanes) -> None:
        regs[name] = value
        lines.append(f"const __m256 {name} = {c};")

    for j in range(4):
        a, b = f"r{2 * j}", f"r{2 * j + 1}"
        op(f"t{2 * j}", f"_mm256_unpacklo_ps({a}, {b})", _unpack(regs[a], regs[b], False))
        op(f"t{2 * j + 1}", f"_mm256_unpackhi_ps({a}, {b})", _unpack(regs[a], regs[b], True))
    for j in range(2):
        for h in range(2):
            a, b = f"t{4 * j + h}", f"t{4 * j + h + 2}"
            for k, imm in enumerate((0x44, 0xEE)):
                op(f"u{4 * j + 2 * h + k}", f"_mm256_shuffle_ps({a}, {b}, {imm:#x})",
                   _shuffle_ps(regs[a], regs[b], imm))
    finals: dict[int, str] = {}
    for j in range(4):
        a, b = f"u{j}", f"u{j + 4}"
        for k, imm in enumerate((0x20, 0x31)):
            name = f"z{2 * j + k}"
            op(name, f"_mm256_permute2f128_ps({a}, {b}, {imm:#x})",
               _permute2f128(regs[a], regs[b], imm))
            channels = {c for _, c in regs[name]}
            if len(channels) != 1 or [p for p, _ in regs[name]] != list(range(8)):
                raise AssertionError(f"transpose network: {name} holds {regs[name]}")
            finals[channels.pop()] = name
    if sorted(finals) != list(range(8)):
        raise AssertionError("transpose network: a channel is missing")
    return lines, finals


LINES, FINALS = _network()
LINES8, FINALS8 = _network8()
GUARD8 = f"{NO} && defined(__AVX2__)"


def _block(w: CWriter, lanes: int, loads: list[str], stores: dict[int, str]) -> None:
    """One transposed block: ``loads`` (one C expression per row register, ``lanes`` of them),
    the network of that width, and per channel ``c`` the store ``stores[c]`` (``{}`` where the
    channel's register goes; a channel without a store is marked unused)."""
    vt, lines, finals = ("__m512", LINES, FINALS) if lanes == 16 else ("__m256", LINES8, FINALS8)
    w.open("")
    for p, load in enumerate(loads):
        w(f"const {vt} r{p} = {load};")
    for line in lines:
        w(line)
    for c in range(lanes):
        w(stores[c].format(finals[c]) if c in stores else f"(void){finals[c]};")
    w.close()


def _chain(steps: Sequence[tuple[str, str | None]], pt: int, o: int, stride: int) -> Callable:
    """The per-channel steps (``epilogue.Chain.channel_steps``) on channel ``o``'s register of
    ``pt`` pixels: ``("bias", ptr)`` adds ``ptr[o]``, ``("add", ptr)`` the ``pt`` floats at
    ``ptr + o*stride``, ``("relu", None)``."""
    def apply(v: str) -> str:
        for kind, ptr in steps:
            if kind == "bias":
                v = f"_mm512_add_ps({v}, _mm512_set1_ps({ptr}[{o}]))"
            elif kind == "add":
                at = f"{ptr} + {o * stride}"
                load = (f"_mm512_loadu_ps({at})" if pt == 16 else
                        f"_mm512_maskz_loadu_ps((__mmask16){(1 << pt) - 1}, {at})")
                v = f"_mm512_add_ps({v}, {load})"
            else:
                v = f"_mm512_max_ps(_mm512_setzero_ps(), {v})"  # NaN and -0 pass, as (v < 0 ? 0 : v)
        return v
    return apply


def tile_transpose(w: CWriter, acc: str, pt: int, ocv: int, width: int, dst: str, stride: int,
                   portable: str, steps: Sequence[tuple[str, str | None]] = (),
                   scalar: Callable[[], None] | None = None) -> bool:
    """``acc[p][o]`` (p < ``pt``, o < ``width``; ``ocv`` the declared channel extent) stored to
    ``dst[o*stride + p]``: AVX-512 in 16 x 16 blocks, AVX2 in 8 x 8 blocks, the C statement
    ``portable`` in the ``#else``; False (nothing written) for a tile this store does not take
    (``pt`` not 2..16, ``ocv`` not a multiple of 16; AVX2 takes ``pt`` 8 and 16 only).

    ``steps`` (see ``_chain``), with ``scalar`` writing the same on ``acc`` in place: under
    AVX-512 the steps run on each channel's transposed register, its pixels contiguous like a
    residual operand's NCHW row (read per pixel across channel planes, the residual Add of
    ResNet-50's 1x1 convs on 14x14 and 7x7 lagged onnxruntime's); the other branches call
    ``scalar`` before their store."""
    if not 2 <= pt <= 16 or ocv % 16:
        return False
    store = ("_mm512_storeu_ps({at}, {{}});" if pt == 16 else
             "_mm256_storeu_ps({at}, _mm512_castps512_ps256({{}}));" if pt == 8 else
             f"_mm512_mask_storeu_ps({{at}}, (__mmask16){(1 << pt) - 1}, {{{{}}}});")
    w.lines.append(f"#if {GUARD}")
    for o0 in range(0, width, 16):
        _block(w, 16, [f"_mm512_loadu_ps(&{acc}[{p}][{o0}])" if p < pt else "_mm512_setzero_ps()"
                       for p in range(16)],
               {c: store.format(at=f"{dst} + {(o0 + c) * stride}").replace(
                   "{}", _chain(steps, pt, o0 + c, stride)("{}"))
                for c in range(min(16, width - o0))})
    if pt % 8 == 0:  # AVX2: whole 8 x 8 blocks only
        w.lines.append(f"#elif {GUARD8}")
        if scalar is not None:
            scalar()
        for p0 in range(0, pt, 8):
            for o0 in range(0, width, 8):
                _block(w, 8, [f"_mm256_loadu_ps(&{acc}[{p0 + p}][{o0}])" for p in range(8)],
                       {c: f"_mm256_storeu_ps({dst} + {(o0 + c) * stride + p0}, {{}});"
                        for c in range(min(8, width - o0))})
    w.lines.append("#else")
    if scalar is not None:
        scalar()
    w(portable)
    w.lines.append("#endif")
    return True
