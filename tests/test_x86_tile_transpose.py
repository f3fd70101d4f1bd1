"""x86/transpose.py's channel-major store of a float register tile against the portable C it
replaces: every (pt, width) the direct conv uses, built with -march=native (the AVX-512 branch),
-march=x86-64-v3 (AVX2) and -march=x86-64-v2 (the #else), on distinct values so a misplaced one shows."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa.x86.helpers import PRELUDE
from opfuse.backends.c.isa.x86.transpose import tile_transpose

SHAPES = [(16, 16, 16), (16, 13, 16), (8, 32, 32), (8, 29, 32), (16, 48, 48), (8, 7, 16),
          (6, 32, 32), (3, 17, 32), (12, 16, 16)]


def _avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _source() -> str:
    w = CWriter(0)
    for k, (pt, width, ocv) in enumerate(SHAPES):
        w.open(f"static void case{k}(float acc[{pt}][{ocv}], float *y)")
        portable = (f"for (int o = 0; o < {width}; ++o) for (int p = 0; p < {pt}; ++p) "
                    f"y[o*{pt + 3} + p] = acc[p][o];")
        assert tile_transpose(w, "acc", pt, ocv, width, "y", pt + 3, portable)
        w.close()
    body = []
    for k, (pt, width, ocv) in enumerate(SHAPES):
        body.append(f"{{ static float acc[{pt}][{ocv}], got[{width * (pt + 3)}], "
                    f"want[{width * (pt + 3)}];\n"
                    f"for (int p = 0; p < {pt}; ++p) for (int o = 0; o < {ocv}; ++o) "
                    f"acc[p][o] = (float)(p*1000 + o);\n"
                    f"for (int i = 0; i < {width * (pt + 3)}; ++i) got[i] = want[i] = -1.0f;\n"
                    f"case{k}(acc, got);\n"
                    f"for (int o = 0; o < {width}; ++o) for (int p = 0; p < {pt}; ++p) "
                    f"want[o*{pt + 3} + p] = acc[p][o];\n"
                    f"bad += memcmp(got, want, sizeof got) != 0; }}")
    return ("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n" + PRELUDE +
            "\n".join(w.lines) + "\nint main(void) { int bad = 0;\n" + "\n".join(body) +
            "\nprintf(\"%d\\n\", bad); return 0; }\n")


@pytest.mark.parametrize("march", ["native", "x86-64-v3", "x86-64-v2"])
def test_tile_transpose_equals_the_portable_store(march: str, tmp_path: Path) -> None:
    if march == "native" and not _avx512():
        pytest.skip("this CPU has no AVX-512F: the AVX2 and portable branches are checked")
    src, exe = tmp_path / "t.c", tmp_path / "t"
    src.write_text(_source())
    subprocess.run(["gcc", "-O2", f"-march={march}", "-std=c99", "-Wall", "-Wextra", "-Werror",
                    str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"


def test_tile_transpose_refuses_tiles_it_does_not_take() -> None:
    w = CWriter(0)
    assert not tile_transpose(w, "acc", 1, 16, 16, "y", 4, ";")
    assert not tile_transpose(w, "acc", 16, 8, 8, "y", 16, ";")
    assert w.lines == []
