"""`opfuse sweep` wall time with one worker and with two, side by side in one run: every shared
model (../shared/models/onnx and /tflite) x every target x fp32,fp16,int8, as a user runs it (one
`opfuse sweep` process each, Python start and worker start included).

    PYTHONPATH=$PWD python benchmarks/sweep.py [--repeats 1] [--jobs 1,2] [--emulate]

Prints each run's wall time, the median per job count, the ratio against the first job count,
the row counts (both runs must give the same file), the CPU and the load average before and
after (`os.getloadavg`), since the ratio on a shared machine is only what the other processes
leave; each run's CPU seconds (the sweep and its workers) show whether the work itself grew. The aim (issue 22): --jobs 2 at least 1.7x faster than --jobs 1 on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "models"
sys.path.insert(0, str(REPO))

from opfuse.measure.calibrate.host import cpu_name  # noqa: E402


def run_sweep(models: list[str], jobs: int, out: Path, emulate: bool) -> tuple[float, float]:
    """(wall s, CPU s of the sweep process and its workers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "opfuse", "sweep", *models, "--targets", "all", "--precisions",
           "fp32,fp16,int8", "--jobs", str(jobs), "-o", str(out), "--quiet",
           *(["--emulate"] if emulate else [])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--jobs", default="1,2", help="job counts to compare, the first is the base")
    parser.add_argument("--emulate", action="store_true", help="also run the C in QEMU")
    args = parser.parse_args()
    if not SHARED.is_dir():
        sys.exit(f"{SHARED} not present: the benchmark sweeps the shared models")
    models = [str(SHARED / "onnx"), str(SHARED / "tflite")]
    jobs = [int(j) for j in args.jobs.split(",")]
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    times: dict[int, list[float]] = {j: [] for j in jobs}
    files: dict[int, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="opfuse-bench-sweep-") as tmp:
        for _ in range(args.repeats):
            for j in jobs:  # alternating, so a change in the machine's load hits both
                out = Path(tmp) / f"jobs{j}.json"
                wall, cpu = run_sweep(models, j, out, args.emulate)
                times[j].append(wall)
                files[j] = out.read_bytes()
                print(f"  --jobs {j}: {wall:.1f} s wall, {cpu:.1f} CPU s (load now "
                      f"{os.getloadavg()[0]:.2f})")
        rows = json.loads(files[jobs[0]])
    n_models = len({r["model"] for r in rows})
    failed = sum(1 for r in rows if r["status"] == "error")
    same = all(files[j] == files[jobs[0]] for j in jobs)
    print(f"rows: {len(rows)} ({n_models} models x {len({r['target'] for r in rows})} targets x "
          f"3 precisions), {failed} error rows; identical files for every job count: {same}")
    base = statistics.median(times[jobs[0]])
    for j in jobs:
        med = statistics.median(times[j])
        print(f"--jobs {j}: median {med:.1f} s over {len(times[j])} run(s); "
              f"speed-up vs --jobs {jobs[0]}: {base / med:.2f}x")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
