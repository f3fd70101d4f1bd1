"""What this host's CPU and gcc offer, for the tests that build the x86 ISA module's C at every
level its guards select (tests/test_c_int8_x86.py, tests/test_x86_fma_tile.py)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path


def cpu_flags() -> set[str]:
    """The CPU's flags as /proc/cpuinfo lists them (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def gcc_macros(flags: list[str]) -> set[str]:
    """The macros gcc defines with ``flags`` (e.g. ``["-march=x86-64-v3"]``)."""
    out = subprocess.run(["gcc", *flags, "-dM", "-E", "-x", "c", "/dev/null"], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("#define")}


def c_stdout(source: str, prefix: str) -> str:
    """What a C test program prints (stripped), built with gcc -O2 -march=native -Werror for
    this CPU."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        src, exe = Path(tmp) / "t.c", Path(tmp) / "t"
        src.write_text(source)
        subprocess.run(["gcc", "-O2", "-march=native", "-Wall", "-Werror", str(src), "-o",
                        str(exe)], check=True)
        return subprocess.run([str(exe)], capture_output=True, text=True,
                              check=True).stdout.strip()
