"""Start-up time of the `opfuse` command: median of 10 process starts of `opfuse --help`, and
which heavy modules each light command imports (none of onnx_ir, onnxscript, onnxruntime).

    PYTHONPATH=$PWD python benchmarks/startup.py [--runs 10]

Aim (issue 9): `opfuse --help` at most 0.3 s. Timed, not asserted: tests/test_startup.py checks
only the structural part (the heavy modules stay out of sys.modules).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("onnx_ir", "onnxscript", "onnxruntime", "onnx", "sympy", "numpy", "pyarrow", "ray")
LIGHT_COMMANDS = (("--help",), ("models",), ("targets",))

# Runs one command in-process and prints the top-level heavy modules it imported, as JSON.
PROBE = """
import json, sys
wanted = set(sys.argv.pop(1).split(','))
from opfuse.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted({m.split('.')[0] for m in sys.modules} & wanted)
print(json.dumps(heavy), file=sys.stderr)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def heavy_imports(args: tuple[str, ...]) -> list[str]:
    """The heavy top-level modules a process running `opfuse ARGS` has imported when it ends."""
    proc = subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY), *args], capture_output=True, text=True,
                          env=_env(), timeout=120, check=False)
    return json.loads(proc.stderr.strip().splitlines()[-1])


def start_times(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "opfuse", "--help"], capture_output=True,
                       env=_env(), timeout=120, check=True)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    times = start_times(args.runs)
    print(f"opfuse --help: median {statistics.median(times):.3f} s over {args.runs} process starts "
          f"(min {min(times):.3f}, max {max(times):.3f}); aim <= 0.300 s")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    print(f"bare python start for comparison: {time.perf_counter() - t0:.3f} s")
    for command in LIGHT_COMMANDS:
        heavy = heavy_imports(command)
        print(f"opfuse {' '.join(command)}: heavy modules imported: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
