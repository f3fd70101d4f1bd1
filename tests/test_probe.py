"""calibrate's bandwidth probes: buffers that never alias modulo 4 KiB, several working sets per
level, and a monotonicity check that warns instead of staying silent."""

from __future__ import annotations

import numpy as np

from opfuse.measure.calibrate.bandwidth import (
    PAGE,
    SKEW,
    aligned_pair,
    copy_rate,
    level_rate,
    monotone_warnings,
    working_sets,
)


def test_pair_is_aligned_and_skewed() -> None:
    for nbytes in (4096, 100_000, 1 << 20):
        src, dst, raw = aligned_pair(nbytes)
        assert src.ctypes.data % PAGE == 0
        skew = (dst.ctypes.data - src.ctypes.data) % PAGE
        assert skew == SKEW and 256 <= skew <= PAGE - 256  # far from aliasing either way
        lo, hi = raw.ctypes.data, raw.ctypes.data + raw.nbytes
        assert lo <= src.ctypes.data and dst.ctypes.data + dst.nbytes <= hi
        assert dst.ctypes.data >= src.ctypes.data + src.nbytes  # no overlap


def test_copy_really_copies_and_rates_are_positive() -> None:
    assert copy_rate(64 * 1024, budget_s=0.02) > 0
    src, dst, _ = aligned_pair(8192)
    np.copyto(dst, src)
    assert np.array_equal(src, dst)


def test_working_sets_lie_within_the_level() -> None:
    l1, l2, l3 = 32 * 1024, 1 << 20, 32 << 20
    for level, below in ((l1, 0), (l2, l1), (l3, l2)):
        sizes = working_sets(level, below)
        assert len(sizes) >= 3
        assert all(2 * below <= s <= level // 2 for s in sizes), (level, sizes)
    rate = level_rate(l2, l1, budget_s=0.02)
    assert len(rate["rates"]) == len(rate["sizes"]) and rate["bytes_per_s"] > 0


def test_monotonicity_check_warns() -> None:
    def lv(name: str, gbs: float) -> dict:
        return {"name": name, "bytes_per_s": gbs * 1e9}

    good = [lv("l1", 200), lv("l2", 100), lv("l3", 60), lv("dram", 14)]
    assert monotone_warnings(good) == []
    assert monotone_warnings([lv("l1", 100), lv("l2", 104)]) == []  # within noise
    bad = [lv("l2", 5), lv("l3", 60), lv("dram", 14)]  # the 4K-aliasing artefact
    (line,) = monotone_warnings(bad)
    assert "l2 measured slower than l3" in line and "not trustworthy" in line
