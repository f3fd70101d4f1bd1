"""Memory-bandwidth probes for ``calibrate`` (docs/architecture.md, the cost row).

A probe copies ``src`` into ``dst`` (``numpy.copyto``: reads and writes every byte, so the rate is
2 x bytes / time) with both buffers carved from one page-aligned allocation:

- ``src`` starts on a 4 KiB boundary and ``dst`` at ``SKEW`` bytes past one, so the two streams
  never sit at the same address modulo 4096. Loads that match an earlier store's address in its
  low 12 bits (4K aliasing) stall on a false dependency: two numpy arrays that happened to be
  16 bytes apart modulo 4096 read L2 at 4-6 GB/s, below DRAM.
- Each level is measured at several working sets (src + dst) between the level below it and half
  of its own size, and its rate is the median of those, so one unlucky size cannot set it.
- ``monotone_warnings`` checks L1 >= L2 >= L3 >= DRAM and says which pair fails: a failed check
  means the figures are not trustworthy (a loaded machine, a wrong cache size), never silence.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

PAGE = 4096
SKEW = 2048 + 320  # dst's offset modulo 4096: far from src's, and not a cache-line multiple of it
SIZES_PER_LEVEL = 3


def aligned_pair(nbytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, backing) float32 arrays of ``nbytes`` each: src page-aligned, dst at SKEW bytes
    past a page boundary (keep ``backing`` alive as long as the views)."""
    n = max(nbytes // 4, 256)
    span = -(-(n * 4) // PAGE) * PAGE  # src's bytes rounded up to whole pages
    raw = np.empty(span + n * 4 + 2 * PAGE + SKEW, dtype=np.uint8)
    start = (-raw.ctypes.data) % PAGE
    src = raw[start : start + n * 4].view(np.float32)
    d0 = start + span + SKEW
    dst = raw[d0 : d0 + n * 4].view(np.float32)
    assert src.ctypes.data % PAGE == 0 and (dst.ctypes.data - src.ctypes.data) % PAGE == SKEW
    src[...] = np.arange(n, dtype=np.float32)
    return src, dst, raw


def _call_overhead_s() -> float:
    """The fixed cost of one ``numpy.copyto`` call (a 64-byte copy, best of many): subtracted
    from every timing, since an L1-sized copy takes about as long as the call itself."""
    a, b = np.ones(16, np.float32), np.empty(16, np.float32)
    best = float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(200):
            np.copyto(b, a)
        best = min(best, (time.perf_counter() - t0) / 200)
    return best


def copy_rate(nbytes: int, budget_s: float = 0.3, overhead_s: float | None = None) -> float:
    """Best-of-repeats bytes/s of copying ``nbytes`` (read + write) between unaliased buffers,
    numpy's per-call overhead subtracted."""
    if overhead_s is None:
        overhead_s = _call_overhead_s()
    src, dst, _keep = aligned_pair(nbytes)
    np.copyto(dst, src)
    reps = max(1, min(2000, int(1e8 // src.nbytes)))  # ~100 MB per timing
    best = float("inf")
    end = time.perf_counter() + budget_s
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            np.copyto(dst, src)
        best = min(best, (time.perf_counter() - t0) / reps)
        if time.perf_counter() >= end:
            break
    return 2 * src.nbytes / max(best - overhead_s, best * 0.05)


def working_sets(level_bytes: int, below_bytes: int) -> list[int]:
    """SIZES_PER_LEVEL working sets (src + dst bytes) spaced geometrically from twice the level
    below (so that level cannot hold them) to half this level (so this one holds both)."""
    hi = max(level_bytes // 2, 2 * PAGE)
    lo = min(max(2 * below_bytes, level_bytes // 4), hi)
    if SIZES_PER_LEVEL == 1 or lo == hi:
        return [hi]
    ratio = (hi / lo) ** (1 / (SIZES_PER_LEVEL - 1))
    return sorted({int(lo * ratio**i) // 64 * 64 for i in range(SIZES_PER_LEVEL)})


def level_rate(level_bytes: int, below_bytes: int, budget_s: float = 0.3) -> dict:
    """The median rate of a level over its working sets, with every size's rate."""
    sizes = working_sets(level_bytes, below_bytes)
    overhead = _call_overhead_s()
    rates = [copy_rate(ws // 2, budget_s, overhead) for ws in sizes]
    return {"bytes_per_s": statistics.median(rates), "sizes": sizes, "rates": rates}


NOISE = 0.10  # adjacent levels within 10% count as equal (L1 and L2 copies can both be capped
# by the core's load/store throughput); the artefact this catches was a 2-3x inversion


def monotone_warnings(levels: list[dict], noise: float = NOISE) -> list[str]:
    """One line per adjacent pair (outermost last) where the inner level is slower than the
    outer one by more than ``noise``."""
    out = []
    for inner, outer in zip(levels, levels[1:], strict=False):
        if inner["bytes_per_s"] < outer["bytes_per_s"] * (1 - noise):
            out.append(
                f"calibrate: {inner['name']} measured slower than {outer['name']} "
                f"({inner['bytes_per_s'] / 1e9:.1f} < {outer['bytes_per_s'] / 1e9:.1f} GB/s, beyond "
                f"{noise:.0%} noise): the "
                "hierarchy is not monotone, so these bandwidths are not trustworthy (a loaded "
                "machine or a wrong cache size); run calibrate again on a quiet machine"
            )
    return out
