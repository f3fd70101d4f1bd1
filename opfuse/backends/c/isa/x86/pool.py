"""A float MaxPool's output row in zmm registers (``IsaKernels.max_pool_row``), under
``__AVX512F__`` with the portable C (pools.py's taps) in the ``#else``.

The portable row takes each tap of each input row as a strided scalar loop (a stride-2 read gcc
vectorizes poorly: ResNet-50's 3x3 stride-2 MaxPool over 64 x 112 x 112 took 0.29 ms, 1.9x
onnxruntime's). Here the row's valid input rows are first reduced into one row ``vm``, 16
columns a vector, kept between SIDE floats of -inf on either side (the padding: no tap needs a
bound), then each output vector of 16 columns takes its taps from ``vm``: at stride 1 one load
a tap, at stride 2 two loads and one ``permutex2var`` keeping the even lanes.

NaN in the window gives NaN, as the portable row: ``max(t, acc)`` keeps ``acc`` when either is
NaN, and where the pair is unordered the sum ``t + acc`` (NaN) replaces it."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.helpers import NO

GUARD = f"{NO} && defined(__AVX512F__)"
SIDE = 16  # -inf floats before and after the reduced row
MAX_WIDTH = 4096  # input columns of a row the reduced row is kept for on the stack
EVEN = "_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)"


def _max(acc: str, t: str) -> str:
    """``acc`` = the NaN-propagating maximum of ``acc`` and ``t`` (C statements)."""
    return (f"{acc} = _mm512_mask_add_ps(_mm512_max_ps({t}, {acc}), "
            f"_mm512_cmp_ps_mask({t}, {acc}, _CMP_UNORD_Q), {t}, {acc});")


def max_pool_row(w: CWriter, g, pacc: str, ph: str, load_row: Callable[[str], str],  # noqa: ANN001
                 portable: Callable[[], None]) -> bool:
    """``pacc[0][0 .. ow)`` = MaxPool output row ``ph`` of one channel (pools.PoolGeom ``g``;
    ``load_row(ih)`` writes C that makes ``src[0]`` input row ``ih``); ``portable()`` writes the
    same in C for the ``#else``. False (nothing written) unless the columns' stride is 1 or 2,
    their dilation 1, the left pad and the window at most SIDE and the row at most MAX_WIDTH
    wide."""
    s, d, pad, kw = g.s[1], g.d[1], g.p[1], g.k[1]
    if (s not in (1, 2) or d != 1 or pad >= SIDE or kw > SIDE or g.iw > MAX_WIDTH
            or g.op != "max"):
        return False
    vecs = -(-g.ow // 16)
    last_read = (vecs * 16 - 1) * s + kw - 1 - pad + (16 if s == 2 else 0)
    length = SIDE + max(g.iw, last_read + 1) + SIDE
    length = -(-length // 16) * 16
    full, tail = g.iw // 16, g.iw % 16
    w.lines.append(f"#if {GUARD}")
    w.open("")
    w(f"float vm[{length}] OPFUSE_ALIGNED;")
    w("const __m512 ninf = _mm512_set1_ps(-INFINITY);")
    w(f"for (int col = 0; col < {length}; col += 16) _mm512_storeu_ps(vm + col, ninf);")
    w.open(f"for (int pkh = 0; pkh < {g.k[0]}; ++pkh)")
    w(f"const int prow = {ph}*{g.s[0]} - {g.p[0]} + pkh*{g.d[0]};")
    w(f"if (prow < 0 || prow >= {g.ih}) continue;")
    src = load_row("prow")
    w.open(f"for (int col = 0; col < {full * 16}; col += 16)")
    w(f"const __m512 t = _mm512_loadu_ps({src}[0] + col);")
    w(f"__m512 a = _mm512_loadu_ps(vm + {SIDE} + col);")
    w(_max("a", "t"))
    w(f"_mm512_storeu_ps(vm + {SIDE} + col, a);")
    w.close()
    if tail:
        m = f"(__mmask16){(1 << tail) - 1:#x}"
        w.open("")
        w(f"const __m512 t = _mm512_mask_loadu_ps(ninf, {m}, {src}[0] + {full * 16});")
        w(f"__m512 a = _mm512_loadu_ps(vm + {SIDE + full * 16});")
        w(_max("a", "t"))
        w(f"_mm512_storeu_ps(vm + {SIDE + full * 16}, a);")
        w.close()
    w.close()
    if s == 2:
        w(f"const __m512i even = {EVEN};")
    w.open(f"for (int v = 0; v < {vecs}; ++v)")
    w("__m512 acc = ninf;")
    for k in range(kw):
        at = f"vm + {SIDE + k - pad} + v*{16 * s}"
        if s == 1:
            w(f"const __m512 t{k} = _mm512_loadu_ps({at});")
        else:
            w(f"const __m512 t{k} = _mm512_permutex2var_ps(_mm512_loadu_ps({at}), even, "
              f"_mm512_loadu_ps({at} + 16));")
        w(_max("acc", f"t{k}"))
    if g.ow % 16:
        w(f"if (v < {vecs - 1}) _mm512_storeu_ps(&{pacc}[0][v*16], acc);")
        w(f"else _mm512_mask_storeu_ps(&{pacc}[0][v*16], (__mmask16){(1 << g.ow % 16) - 1:#x}, acc);")
    else:
        w(f"_mm512_storeu_ps(&{pacc}[0][v*16], acc);")
    w.close()
    w.close()
    w.lines.append("#else")
    portable()
    w.lines.append("#endif")
    return True
