"""``cgen.blocks`` / ``block_loops`` (opfuse/backends/c/cgen.py): the full-blocks-then-one-tail
split every blocked kernel loops over. Checked against an independent walk of the range, and the
emitted C run by gcc against the indices it must visit."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c.cgen import CWriter, block_loops, blocks
from opfuse.backends.c.flags import BASE, WARN

SPLITS = [(0, 4), (3, 4), (4, 4), (13, 4), (16, 4), (45, 16), (1, 1), (7, 1)]


@pytest.mark.parametrize("total, size", SPLITS)
def test_blocks_cover_the_range_once_in_order(total: int, size: int) -> None:
    """Every index of [0, total) in exactly one block, in order; the full blocks first, then at
    most one shorter one; no block of count 0."""
    seen = []
    for length, count, start in blocks(total, size):
        assert count > 0 and 0 < length <= size
        assert length == size or count == 1
        for b in range(count):
            seen.extend(range(start + b * length, start + (b + 1) * length))
    assert seen == list(range(total))
    lengths = [length for length, _, _ in blocks(total, size)]
    assert lengths == sorted(lengths, reverse=True) and len(lengths) <= 2


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("total, size", SPLITS)
def test_block_loops_visit_each_index_once(total: int, size: int, tmp_path: Path) -> None:
    """The loops block_loops writes, compiled, add one to every index they cover: each of
    [0, total) once, nothing beyond it (the buffer has a guard slot)."""
    w = CWriter(1)
    for length in block_loops(w, total, size, "b", "i0", "base + "):
        w(f"for (int i = 0; i < {length}; ++i) hits[i0 + i] += 1;")
    (tmp_path / "loops.c").write_text(
        "void run(int *hits, int base);\nvoid run(int *hits, int base) {\n"
        f"{w.text()}}}\n")
    subprocess.run(["gcc", *BASE, *WARN, "-Wno-unused-parameter", "-shared", "-fPIC", "loops.c",
                    "-o", "loops.so"], cwd=tmp_path, check=True)
    lib = ctypes.CDLL(str(tmp_path / "loops.so"))
    hits = np.zeros(total + 2, np.int32)
    lib.run(hits.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(1))
    assert hits.tolist() == [0] + [1] * total + [0]
